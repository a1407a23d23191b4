// CPU allocator: aligned_alloc with byte counters, and the inference arena (engine/cpu_cache.h):
// size-class free lists used while a CpuCacheScope is alive.
#include "engine/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/cpu_cache.h"
#include "engine/error.h"

namespace engine {

size_t cpu_cache_size_class(size_t nbytes) {
  Y9_CHECK(nbytes <= std::numeric_limits<size_t>::max() / 2, "CPU allocator: ", nbytes, " bytes is not a valid size");
  const size_t r = (nbytes + 63) / 64 * 64;
  if (r <= 4096) return r;
  size_t p = 4096;
  while (p <= r / 2) p *= 2;
  const size_t step = p / 8;  // 512 B at 4 KiB, 2 MiB at 16 MiB
  return (r + step - 1) / step * step;
}

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    std::unique_lock<std::mutex> lock(mu_);
    stats_.num_allocs++;
    if (scopes_ > 0) {
      const size_t size = cpu_cache_size_class(nbytes);
      void* p = nullptr;
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= size;
      } else {
        lock.unlock();
        p = system_alloc(nbytes, size);
        lock.lock();
        stats_.num_misses++;
      }
      try {
        in_scope_blocks_.insert(p);
      } catch (...) {
        std::free(p);
        throw;
      }
      count_live_locked(nbytes);
      return p;
    }
    lock.unlock();
    void* p = system_alloc(nbytes, (nbytes + 63) / 64 * 64);
    lock.lock();
    stats_.num_misses++;
    count_live_locked(nbytes);
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    if (!p) return;
    std::unique_lock<std::mutex> lock(mu_);
    stats_.live_bytes -= static_cast<int64_t>(nbytes);
    auto it = in_scope_blocks_.empty() ? in_scope_blocks_.end() : in_scope_blocks_.find(p);
    if (it != in_scope_blocks_.end()) {
      in_scope_blocks_.erase(it);
      const size_t size = cpu_cache_size_class(nbytes);
      if (scopes_ > 0 && cached_bytes_ + size <= limit_) {
        try {
          free_[size].push_back(p);
          cached_bytes_ += size;
          return;
        } catch (...) {  // no memory for the list: give the block back instead (deallocate must not throw)
        }
      }
    }
    lock.unlock();
    std::free(p);
  }
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    AllocatorStats s = stats_;
    s.cached_bytes = static_cast<int64_t>(cached_bytes_);
    return s;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.live_bytes;
  }
  void open_scope(size_t limit) {
    std::lock_guard<std::mutex> lock(mu_);
    scopes_++;
#if defined(__SANITIZE_ADDRESS__)
    limit = 0;  // under AddressSanitizer nothing is cached: a reused block would hide a use after free
#endif
    limits_.insert(limit);
    limit_ = *limits_.rbegin();
  }
  /// Ends a scope of cap `limit`: the cap becomes the largest of the live scopes', and cached blocks
  /// beyond it go back to the system (all of them when the last scope ends).
  void close_scope(size_t limit) {
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --scopes_;
#if defined(__SANITIZE_ADDRESS__)
      limit = 0;
#endif
      if (auto it = limits_.find(limit); it != limits_.end()) limits_.erase(it);
      limit_ = limits_.empty() ? 0 : *limits_.rbegin();
      if (scopes_ == 0)
        take_cached_locked(drop);
      else
        trim_cached_locked(drop);
    }
    for (void* p : drop) std::free(p);
  }

 private:
  static void* system_alloc(size_t nbytes, size_t size) {
    void* p = std::aligned_alloc(64, size);
    Y9_CHECK(p != nullptr, "CPU allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void count_live_locked(size_t nbytes) {
    stats_.live_bytes += static_cast<int64_t>(nbytes);
    if (stats_.live_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.live_bytes;
  }
  /// Moves cached blocks into `out` until the cached bytes fit under limit_ (largest classes first).
  void trim_cached_locked(std::vector<void*>& out) {
    while (cached_bytes_ > limit_) {
      auto largest = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (!it->second.empty() && (largest == free_.end() || it->first > largest->first)) largest = it;
      if (largest == free_.end()) break;
      out.push_back(largest->second.back());
      largest->second.pop_back();
      cached_bytes_ -= largest->first;
    }
  }
  void take_cached_locked(std::vector<void*>& out) {
    for (auto& [size, list] : free_) out.insert(out.end(), list.begin(), list.end());
    free_.clear();
    cached_bytes_ = 0;
  }

  mutable std::mutex mu_;
  AllocatorStats stats_;
  int scopes_ = 0;        // live CpuCacheScopes
  size_t limit_ = 0;      // the largest max_cached_bytes among them
  std::multiset<size_t> limits_;  // the caps of the live scopes
  size_t cached_bytes_ = 0;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> unused blocks
  std::unordered_set<void*> in_scope_blocks_;  // blocks in use that were allocated at their size class
};

// Never destroyed: tensors held by objects destroyed after it at exit (statics of an embedding
// program, the backend registry) still free their blocks into it.
CpuAllocator& cpu_instance() {
  static CpuAllocator* instance = new CpuAllocator;
  return *instance;
}

}  // namespace

Allocator* cpu_allocator() { return &cpu_instance(); }

Allocator* allocator_for(Device d) { return d.is_cpu() ? cpu_allocator() : cuda_allocator(d.index); }

CpuCacheScope::CpuCacheScope(size_t max_cached_bytes) : limit_(max_cached_bytes) {
  cpu_instance().open_scope(max_cached_bytes);
}
CpuCacheScope::~CpuCacheScope() { cpu_instance().close_scope(limit_); }

}  // namespace engine
