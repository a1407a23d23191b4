// CPU allocator: aligned_alloc with byte counters.
#include "engine/allocator.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "engine/error.h"

namespace engine {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    Y9_CHECK(p != nullptr, "CPU allocator: out of memory allocating ", nbytes, " bytes");
    std::lock_guard<std::mutex> lock(mu_);
    stats_.live_bytes += static_cast<int64_t>(nbytes);
    if (stats_.live_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.live_bytes;
    stats_.num_allocs++;
    stats_.num_misses++;
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    if (!p) return;
    std::free(p);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.live_bytes -= static_cast<int64_t>(nbytes);
  }
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.live_bytes;
  }

 private:
  mutable std::mutex mu_;
  AllocatorStats stats_;
};

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator instance;
  return &instance;
}

Allocator* allocator_for(Device d) { return d.is_cpu() ? cpu_allocator() : cuda_allocator(d.index); }

}  // namespace engine
