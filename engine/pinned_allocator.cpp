// Pinned host allocator: CachingAllocatorCore over cudaHostAlloc/cudaFreeHost (with CUDA), and
// the factory of CPU tensors backed by a given allocator. Without Y9_WITH_CUDA the pool does not
// exist and pinned_host_allocator() returns nullptr.
#include "engine/pinned_allocator.h"

#include "engine/error.h"

#if defined(Y9_WITH_CUDA)
#include <cuda_runtime.h>

#include "engine/caching_allocator.h"
#include "engine/cuda_runtime.h"
#endif

namespace engine {

#if defined(Y9_WITH_CUDA)
namespace {

class PinnedHostAllocator final : public Allocator {
 public:
  PinnedHostAllocator()
      : core_(
            [](size_t n) -> void* {
              void* p = nullptr;
              cudaError_t err = cudaHostAlloc(&p, n, cudaHostAllocPortable);
              if (err == cudaErrorMemoryAllocation) {
                cudaGetLastError();  // clear; the core empties the cache, retries, then throws
                return nullptr;
              }
              if (err != cudaSuccess) throw_cuda_error(err, "cudaHostAlloc", __FILE__, __LINE__);
              return p;
            },
            [](void* p) {
              // Never throws (may run from empty_cache in error paths): errors are cleared.
              if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
            },
            "pinned host") {}

  void* allocate(size_t nbytes) override { return core_.allocate(nbytes); }
  void deallocate(void* p, size_t nbytes) override { core_.deallocate(p, nbytes); }
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override { return core_.stats(); }
  void reset_peak() override { core_.reset_peak(); }
  void empty_cache() override { core_.empty_cache(); }

 private:
  CachingAllocatorCore core_;
};

// True when page-locked memory can actually be allocated: a GPU is visible and a small
// cudaHostAlloc succeeds. Any CUDA error means "no GPU" (errors are cleared).
bool pinned_usable() {
  if (cuda_device_count() <= 0) return false;
  void* p = nullptr;
  if (cudaHostAlloc(&p, 4096, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
  return true;
}

}  // namespace

Allocator* pinned_host_allocator() {
  // Never destroyed (allocator-pool global, guide 3.9): tensors in static storage may be freed
  // after main returns.
  static Allocator* a = pinned_usable() ? new PinnedHostAllocator() : nullptr;
  return a;
}
#else
Allocator* pinned_host_allocator() { return nullptr; }
#endif

Tensor empty_from_allocator(Allocator* allocator, const Shape& shape, DType dtype) {
  if (!allocator) return Tensor::empty(shape, dtype);
  Y9_CHECK(allocator->device().is_cpu(), "empty_from_allocator: allocator of ", allocator->device().str(),
           " is not a CPU-memory allocator");
  for (int64_t s : shape) Y9_CHECK_SHAPE(s >= 0, "empty_from_allocator: negative size in shape");
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = allocator->allocate(nbytes);
  try {
    return Tensor::from_blob(p, shape, dtype, Device::cpu(),
                             [allocator, nbytes](void* q) { allocator->deallocate(q, nbytes); });
  } catch (...) {
    allocator->deallocate(p, nbytes);
    throw;
  }
}

}  // namespace engine
