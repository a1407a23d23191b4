// The CUDA caching allocator: CachingAllocatorCore over cudaMalloc/cudaFree, one per device,
// created on first use and kept for the process (the allocator-pool global of guide 3.9).
// Compiled to nothing without Y9_WITH_CUDA (engine/cuda_runtime.cpp then provides the stub).
#if defined(Y9_WITH_CUDA)
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <mutex>
#include <vector>

#include "engine/allocator.h"
#include "engine/backend.h"
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
            "cuda:" + std::to_string(device), event_ops(device, this)) {}

  void* allocate(size_t nbytes) override { return allocate(nbytes, StreamKind::Compute); }
  void* allocate(size_t nbytes, StreamKind kind) override {
    if (nbytes == 0) return nullptr;
    return core_.allocate(nbytes, stream(kind));
  }
  void deallocate(void* p, size_t nbytes) override { core_.deallocate(p, nbytes); }
  void record_stream(void* p, StreamKind kind) override { core_.record_stream(p, stream(kind)); }
  Device device() const override { return Device::cuda(device_); }
  AllocatorStats stats() const override { return core_.stats(); }
  void reset_peak() override { core_.reset_peak(); }
  void empty_cache() override { core_.empty_cache(); }

 private:
  // The native stream of `kind`: the compute stream from the stream registry, the side streams
  // from the device's CudaContext (both created on first use and kept for the process).
  cudaStream_t stream(StreamKind kind) {
    const int k = static_cast<int>(kind);
    cudaStream_t s = streams_[k].load(std::memory_order_acquire);
    if (s) return s;
    CudaDeviceGuard g(device_);  // cuda_stream() makes the device current: restore the caller's
    s = kind == StreamKind::Compute
            ? cuda_stream(device_)
            : static_cast<cudaStream_t>(backend(DeviceType::CUDA).context(Device::cuda(device_)).stream(kind));
    streams_[k].store(s, std::memory_order_release);
    return s;
  }

  // cudaEvent_t callbacks; events are pooled (created once, reused) so the steady state creates
  // none. Called under the core's mutex.
  static CachingAllocatorCore::EventOps event_ops(int device, CudaCachingAllocator* self) {
    CachingAllocatorCore::EventOps ops;
    ops.record = [device, self](void* stream) -> void* {
      CudaDeviceGuard g(device);
      cudaEvent_t e = nullptr;
      if (!self->event_pool_.empty()) {
        e = self->event_pool_.back();
        self->event_pool_.pop_back();
      } else {
        CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      }
      cudaError_t err = cudaEventRecord(e, static_cast<cudaStream_t>(stream));
      if (err != cudaSuccess) {
        self->event_pool_.push_back(e);
        throw_cuda_error(err, "cudaEventRecord (caching allocator)", __FILE__, __LINE__);
      }
      return e;
    };
    ops.query = [device](void* e) {
      CudaDeviceGuard g(device);
      cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(e));
      if (err == cudaErrorNotReady) {
        cudaGetLastError();  // not an error: clear it
        return false;
      }
      if (err != cudaSuccess) throw_cuda_error(err, "cudaEventQuery (caching allocator)", __FILE__, __LINE__);
      return true;
    };
    ops.synchronize = [device](void* e) {
      CudaDeviceGuard g(device);
      CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
    };
    ops.destroy = [self](void* e) { self->event_pool_.push_back(static_cast<cudaEvent_t>(e)); };
    ops.describe_memory = [device]() -> std::string {
      size_t free_b = 0, total_b = 0;
      int prev = -1;
      if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
      if (prev != device) cudaSetDevice(device);
      const cudaError_t err = cudaMemGetInfo(&free_b, &total_b);
      if (prev >= 0 && prev != device) cudaSetDevice(prev);
      if (err != cudaSuccess) {
        cudaGetLastError();
        return "";
      }
      char buf[128];
      std::snprintf(buf, sizeof(buf), "; the device has %.2f MiB free of %.2f MiB",
                    static_cast<double>(free_b) / 1048576.0, static_cast<double>(total_b) / 1048576.0);
      return buf;
    };
    return ops;
  }

  int device_;
  std::vector<cudaEvent_t> event_pool_;  // guarded by the core's mutex (callbacks run under it)
  std::atomic<cudaStream_t> streams_[kNumStreamKinds] = {};
  CachingAllocatorCore core_;  // last: destroyed first, while the event pool still exists
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
