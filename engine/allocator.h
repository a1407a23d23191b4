// Memory allocators: a 64-byte aligned CPU allocator and (with CUDA) a caching device allocator.
// Both keep statistics (live and peak bytes) so tests can count memory held by saved tensors.
// The allocator pools are one of the two process-wide globals the style guide allows.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/backend.h"
#include "engine/device.h"

namespace engine {

/// Byte counters of one allocator. live = requested bytes not yet freed; peak = max of live
/// since the last reset_peak(); cached = bytes held by a caching allocator but not in use.
struct AllocatorStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t cached_bytes = 0;
  int64_t num_allocs = 0;   ///< calls to allocate()
  int64_t num_misses = 0;   ///< allocations that reached the system (malloc / cudaMalloc)
};

/// Interface of an allocator. allocate(0) returns nullptr. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Returns memory for `nbytes` bytes (64-byte aligned on CPU, 256 on CUDA), for work on the
  /// device's compute stream. Throws engine::Error (CPU) or engine::OutOfMemoryError (a
  /// CudaError; CUDA) when out of memory.
  virtual void* allocate(size_t nbytes) = 0;
  /// As allocate(), for work queued on stream `stream` of the device: a caching allocator hands
  /// out a cached block only to requests on the stream it was allocated on. The CPU (one
  /// synchronous stream) ignores `stream`. Same errors as allocate().
  virtual void* allocate(size_t nbytes, StreamKind stream) {
    (void)stream;
    return allocate(nbytes);
  }
  /// Returns memory from allocate(); `nbytes` must be the size that was asked for. A block that
  /// record_stream() marked as used by other streams is reused only after the work queued on
  /// those streams at this call is complete. Throws InternalError for a pointer it did not give.
  virtual void deallocate(void* p, size_t nbytes) = 0;
  /// Tells the allocator that the block `p` (as returned by allocate, still in use) is also used
  /// by work queued on `stream`, so that after deallocate it is not handed out again before that
  /// work is done (PyTorch's recordStream). A no-op on the CPU and for the block's own stream.
  /// Throws InternalError when `p` is not a block in use of this allocator (CUDA).
  virtual void record_stream(void* p, StreamKind stream) { (void)p, (void)stream; }
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  /// Gives cached blocks back to the system (no-op on CPU).
  virtual void empty_cache() {}
};

/// The process-wide CPU allocator (64-byte aligned, counted).
Allocator* cpu_allocator();
/// The caching allocator of CUDA device `index`; throws engine::Error when CUDA is not compiled.
Allocator* cuda_allocator(int index);
/// Allocator for a device.
Allocator* allocator_for(Device d);

}  // namespace engine
