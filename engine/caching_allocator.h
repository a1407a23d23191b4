// The bookkeeping of the CUDA caching allocator (size classes, free lists, statistics) as plain
// C++ driven by raw alloc/free callbacks, so the policy is unit-tested on the CPU with a fake
// backend (tests/engine/caching_allocator_test.cpp); engine/cuda_allocator.cpp plugs in
// cudaMalloc/cudaFree. Modelled on PyTorch's CUDACachingAllocator (c10/cuda), without splitting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/allocator.h"

namespace engine {

/// Caching policy over a raw allocator. Requests are rounded to a size class:
///   - small (rounded size <= kSmallSize = 1 MiB): multiples of kMinBlockSize = 512 bytes;
///   - large: multiples of kLargeRound = 2 MiB (PyTorch's kRoundLarge).
/// Freed blocks go to a free list of their pool (small or large) and are reused by later
/// requests: small requests take a cached block of exactly their size class; large requests
/// take the smallest cached block of at least their size and less than twice it (blocks are
/// never split, so this bounds the waste). Only a miss calls `raw_alloc`; when it fails
/// (returns nullptr) every cached block is released and the call retried once before throwing.
/// Every raw pointer must be `kAlignment` (256-byte) aligned, as cudaMalloc's are.
/// Stats: live_bytes counts requested bytes in use, cached_bytes the rounded bytes on free
/// lists, num_misses the raw_alloc calls. Thread-safe (one mutex). Blocks are reused without
/// any stream/event tracking: the CUDA user orders all work of a device on one stream.
class CachingAllocatorCore {
 public:
  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallSize = size_t(1) << 20;
  static constexpr size_t kLargeRound = size_t(2) << 20;
  static constexpr size_t kAlignment = 256;

  /// raw_alloc(n) returns n bytes or nullptr when out of memory; raw_free(p) releases them.
  /// `what` names the device in error messages ("cuda:0").
  CachingAllocatorCore(std::function<void*(size_t)> raw_alloc, std::function<void(void*)> raw_free,
                       std::string what);
  /// Releases cached blocks; blocks still in use are leaked (their owners may outlive us).
  ~CachingAllocatorCore();
  CachingAllocatorCore(const CachingAllocatorCore&) = delete;
  CachingAllocatorCore& operator=(const CachingAllocatorCore&) = delete;

  /// The size class of a request of `nbytes` (> 0) bytes.
  static size_t round_size(size_t nbytes);

  /// Memory for `nbytes` bytes, 256-byte aligned; nullptr for 0. Throws engine::CudaError
  /// (message names `what`) when raw_alloc fails even after emptying the cache.
  void* allocate(size_t nbytes);
  /// Returns a block from allocate() to its free list. Throws InternalError for an unknown pointer.
  void deallocate(void* p, size_t nbytes);
  /// Frees every cached (unused) block through raw_free.
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();

 private:
  void release_cached_locked();

  std::function<void*(size_t)> raw_alloc_;
  std::function<void(void*)> raw_free_;
  std::string what_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_small_, free_large_;  // size class -> block
  std::unordered_map<void*, size_t> in_use_;              // block -> size class
  AllocatorStats stats_;
};

}  // namespace engine
