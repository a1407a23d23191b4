// The bookkeeping of the CUDA caching allocator (size classes, per-stream free lists, cross-stream
// use through events, statistics) as plain C++ driven by raw alloc/free and event callbacks, so
// the policy is unit-tested on the CPU with a fake backend (tests/engine/caching_allocator_test.cpp);
// engine/cuda_allocator.cpp plugs in cudaMalloc/cudaFree and cudaEvent*. Modelled on PyTorch's
// CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp: Block::stream, stream_uses,
// recordStream, insert_events / process_events, synchronize_and_free_events), without splitting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engine/allocator.h"

namespace engine {

/// Caching policy over a raw allocator. Requests are rounded to a size class:
///   - small (rounded size <= kSmallSize = 1 MiB): multiples of kMinBlockSize = 512 bytes;
///   - large: multiples of kLargeRound = 2 MiB (PyTorch's kRoundLarge).
/// Streams: every block belongs to the stream it was first allocated on (an opaque handle,
/// cudaStream_t on CUDA) and is reused only by requests on that stream, whose work is ordered
/// after the previous owner's. Freed blocks go to the free list of their (stream, pool) and are
/// reused by later requests: small requests take a cached block of exactly their size class;
/// large requests take the smallest cached block of at least their size and less than twice it
/// (blocks are never split, so this bounds the waste). Only a miss calls `raw_alloc`.
/// Cross-stream use: record_stream(p, s) notes that block p is also used by work on stream s.
/// Freeing such a block records one event on each of those streams (EventOps::record) and the
/// block returns to its free list only once all of them are complete (EventOps::query, checked
/// on every later allocate/deallocate and on demand by process_events()).
/// Out of memory: when raw_alloc fails (returns nullptr) the allocator waits for every pending
/// event (EventOps::synchronize), releases every cached block of every stream through raw_free
/// and retries once; a second failure throws OutOfMemoryError.
/// Every raw pointer must be `kAlignment` (256-byte) aligned, as cudaMalloc's are.
/// Stats: live_bytes counts requested bytes in use, cached_bytes the rounded bytes held but not
/// in use (free lists and blocks waiting for events), num_misses the raw_alloc calls.
/// Thread-safe (one mutex; the callbacks run under it and must not call back into the core).
class CachingAllocatorCore {
 public:
  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallSize = size_t(1) << 20;
  static constexpr size_t kLargeRound = size_t(2) << 20;
  static constexpr size_t kAlignment = 256;

  /// An opaque stream handle (cudaStream_t on CUDA); the core only compares them.
  using Stream = void*;
  /// An opaque event handle (cudaEvent_t on CUDA).
  using EventHandle = void*;

  /// The event callbacks of the backend, needed only by record_stream. All are called with the
  /// core's mutex held.
  struct EventOps {
    /// Records an event marking the work queued so far on `stream`; returns its handle (not
    /// null). May throw (the error propagates out of deallocate).
    std::function<EventHandle(Stream)> record;
    /// True once the event's work is complete. May throw.
    std::function<bool(EventHandle)> query;
    /// Blocks the host until the event is complete (out-of-memory path and destruction). May throw.
    std::function<void(EventHandle)> synchronize;
    /// Releases the event (it is complete or no longer needed). Must not throw.
    std::function<void(EventHandle)> destroy;
    /// Optional: extra words for the out-of-memory message (", the device has N MiB free of M
    /// MiB"); called after a failed raw allocation. Must not throw.
    std::function<std::string()> describe_memory;
  };

  /// raw_alloc(n) returns n bytes or nullptr when out of memory (it may throw for other
  /// failures); raw_free(p) releases them and must not throw. `what` names the device in error
  /// messages ("cuda:0"). Without `events`, record_stream throws InternalError.
  CachingAllocatorCore(std::function<void*(size_t)> raw_alloc, std::function<void(void*)> raw_free,
                       std::string what, EventOps events = {});
  /// Waits for pending events (errors ignored) and releases cached blocks; blocks still in use
  /// are leaked (their owners may outlive us).
  ~CachingAllocatorCore();
  CachingAllocatorCore(const CachingAllocatorCore&) = delete;
  CachingAllocatorCore& operator=(const CachingAllocatorCore&) = delete;

  /// The size class of a request of `nbytes` (> 0) bytes.
  static size_t round_size(size_t nbytes);

  /// Memory for `nbytes` bytes on `stream` (the block may be reused at once by work queued on
  /// that stream), 256-byte aligned; nullptr for 0. First returns the blocks whose events have
  /// completed to their free lists. Throws OutOfMemoryError (a CudaError; the message names
  /// `what`, the bytes asked, the bytes this allocator holds and suggests a smaller --batch) when
  /// raw_alloc fails even after waiting for pending events and emptying the cache; propagates
  /// errors of raw_alloc and of the event callbacks.
  void* allocate(size_t nbytes, Stream stream = nullptr);
  /// Returns a block from allocate(); `nbytes` must be the size asked for. A block used on other
  /// streams (record_stream) waits for events recorded now on those streams before it can be
  /// reused. Throws InternalError for an unknown pointer (nullptr is a no-op); propagates errors
  /// of the event callbacks (the block is then kept as in use).
  void deallocate(void* p, size_t nbytes);
  /// Marks the in-use block starting at `p` as also used by work queued on `stream` until it is
  /// freed (PyTorch's recordStream). A no-op for the block's own stream or a repeated stream.
  /// Throws InternalError when `p` is not the start of a block in use, or when the core was
  /// built without EventOps and `stream` is another stream.
  void record_stream(void* p, Stream stream);
  /// Moves the blocks whose events have all completed back to their free lists. Propagates
  /// errors of EventOps::query.
  void process_events();
  /// Waits for every pending event, then frees every cached (unused) block through raw_free.
  /// Propagates errors of EventOps::synchronize.
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();
  /// Blocks freed but waiting for events of other streams (for tests and diagnostics).
  size_t num_pending_blocks() const;

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;                  // size class
    Stream stream = nullptr;          // allocation stream
    std::vector<Stream> stream_uses;  // other streams using it (record_stream)
    int pending_events = 0;
    bool in_use = false;
  };
  // Free-list key: (stream, size, ptr), so lower_bound on (stream, size, 0) finds the smallest
  // block of at least `size` on that stream.
  using Key = std::tuple<uintptr_t, size_t, uintptr_t>;

  void insert_free_locked(Block* b);
  void process_events_locked();
  void synchronize_and_free_events_locked();
  void release_cached_locked();
  [[noreturn]] void throw_oom_locked(size_t nbytes, size_t size);

  std::function<void*(size_t)> raw_alloc_;
  std::function<void(void*)> raw_free_;
  std::string what_;
  EventOps events_;
  mutable std::mutex mu_;
  std::set<Key> free_small_, free_large_;
  std::unordered_map<void*, Block> blocks_;                // every block held, by pointer
  std::vector<std::pair<EventHandle, Block*>> pending_;    // events of freed blocks, in order
  AllocatorStats stats_;
};

}  // namespace engine
