// The CUDA caching allocator: CachingAllocatorCore over cudaMalloc/cudaFree, one per device,
// created on first use and kept for the process (the allocator-pool global of guide 3.9).
// Compiled to nothing without Y9_WITH_CUDA (engine/cuda_runtime.cpp then provides the stub).
#if defined(Y9_WITH_CUDA)
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <vector>

#include "engine/allocator.h"
#include "engine/caching_allocator.h"
#include "engine/cuda_runtime.h"
#include "engine/error.h"

namespace engine {

namespace {

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device)
      : device_(device),
        core_(
            [device](size_t n) -> void* {
              CudaDeviceGuard g(device);
              void* p = nullptr;
              cudaError_t err = cudaMalloc(&p, n);
              if (err == cudaErrorMemoryAllocation) {
                cudaGetLastError();  // clear; the core empties the cache and retries, then throws
                return nullptr;
              }
              if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
              return p;
            },
            [device](void* p) {
              // Never throws (may run from empty_cache in error paths): errors are cleared, the
              // block is leaked. cudaFree synchronises the device, so queued kernels finish first.
              int prev = -1;
              if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
              if (prev != device) cudaSetDevice(device);
              if (cudaFree(p) != cudaSuccess) cudaGetLastError();
              if (prev >= 0 && prev != device) cudaSetDevice(prev);
            },
            "cuda:" + std::to_string(device)) {}

  void* allocate(size_t nbytes) override { return core_.allocate(nbytes); }
  void deallocate(void* p, size_t nbytes) override { core_.deallocate(p, nbytes); }
  Device device() const override { return Device::cuda(device_); }
  AllocatorStats stats() const override { return core_.stats(); }
  void reset_peak() override { core_.reset_peak(); }
  void empty_cache() override { core_.empty_cache(); }

 private:
  int device_;
  CachingAllocatorCore core_;
};

struct CudaAllocatorRegistry {
  std::mutex mu;
  std::vector<std::unique_ptr<CudaCachingAllocator>> per_device;
};

}  // namespace

Allocator* cuda_allocator(int index) {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static CudaAllocatorRegistry* reg = new CudaAllocatorRegistry();
  std::lock_guard<std::mutex> lock(reg->mu);
  if (reg->per_device.empty()) {
    int n = cuda_device_count();
    Y9_CHECK_T(CudaError, n > 0, "cuda:", index, " requested but no CUDA device is visible (no driver or GPU)");
    reg->per_device.resize(static_cast<size_t>(n));
  }
  Y9_CHECK_T(CudaError, index >= 0 && index < static_cast<int>(reg->per_device.size()), "cuda:", index,
             " out of range (", reg->per_device.size(), " devices visible)");
  auto& a = reg->per_device[static_cast<size_t>(index)];
  if (!a) a = std::make_unique<CudaCachingAllocator>(index);
  return a.get();
}

}  // namespace engine
#endif  // Y9_WITH_CUDA
