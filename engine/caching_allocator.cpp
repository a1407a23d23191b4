// CachingAllocatorCore: size classes, free-list reuse and statistics (see caching_allocator.h).
#include "engine/caching_allocator.h"

#include <cstdint>

#include "engine/error.h"

namespace engine {

CachingAllocatorCore::CachingAllocatorCore(std::function<void*(size_t)> raw_alloc, std::function<void(void*)> raw_free,
                                           std::string what)
    : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)), what_(std::move(what)) {}

CachingAllocatorCore::~CachingAllocatorCore() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

size_t CachingAllocatorCore::round_size(size_t nbytes) {
  if (nbytes <= kMinBlockSize) return kMinBlockSize;
  size_t small = (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
  if (small <= kSmallSize) return small;
  return (nbytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void* CachingAllocatorCore::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  const bool small = size <= kSmallSize;
  auto& pool = small ? free_small_ : free_large_;
  auto it = pool.lower_bound(size);
  // Small: exact size class only. Large: best fit below 2x, because blocks are not split.
  if (it != pool.end() && (small ? it->first == size : it->first < 2 * size)) {
    p = it->second;
    stats_.cached_bytes -= static_cast<int64_t>(it->first);
    in_use_[p] = it->first;
    pool.erase(it);
  } else {
    p = raw_alloc_(size);
    if (!p) {  // out of memory: give the cache back and try once more
      release_cached_locked();
      p = raw_alloc_(size);
    }
    Y9_CHECK_T(CudaError, p != nullptr, what_, " caching allocator: out of memory allocating ", nbytes,
               " bytes (size class ", size, "; live ", stats_.live_bytes, " bytes)");
    Y9_ASSERT(reinterpret_cast<uintptr_t>(p) % kAlignment == 0, what_, " raw allocation not 256-byte aligned");
    stats_.num_misses++;
    in_use_[p] = size;
  }
  stats_.num_allocs++;
  stats_.live_bytes += static_cast<int64_t>(nbytes);
  if (stats_.live_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.live_bytes;
  return p;
}

void CachingAllocatorCore::deallocate(void* p, size_t nbytes) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(p);
  Y9_ASSERT(it != in_use_.end(), what_, " caching allocator: free of an unknown pointer");
  const size_t size = it->second;
  in_use_.erase(it);
  (size <= kSmallSize ? free_small_ : free_large_).emplace(size, p);
  stats_.cached_bytes += static_cast<int64_t>(size);
  stats_.live_bytes -= static_cast<int64_t>(nbytes);
}

void CachingAllocatorCore::release_cached_locked() {
  for (auto* pool : {&free_small_, &free_large_}) {
    for (auto& [size, p] : *pool) raw_free_(p);
    pool->clear();
  }
  stats_.cached_bytes = 0;
}

void CachingAllocatorCore::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

AllocatorStats CachingAllocatorCore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocatorCore::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.live_bytes;
}

}  // namespace engine
