// CUDA runtime facts and helpers of the engine: device count, copies between devices, and (with
// the CUDA backend) the CUDA_CHECK family of macros (guide/style.md 3.5), the per-device streams
// and the CUDA DeviceContext. The declarations inside the #if need the CUDA runtime headers (not
// nvcc): include them only from code compiled with Y9_WITH_CUDA.
#pragma once
#include <cstddef>

#include "engine/backend.h"
#include "engine/device.h"
#include "engine/error.h"

namespace engine {

/// Copies `nbytes` bytes between any two devices (CPU<->CPU, CPU<->CUDA, CUDA<->CUDA), ordered
/// after the work already queued on the CUDA device's compute stream. D2H and H2D return only
/// when the copy is complete (the host buffer may be reused or read at once); D2D on one device
/// is asynchronous on its compute stream; D2D between devices synchronises the source stream,
/// then copies on the destination stream. nbytes == 0 is a no-op. Throws CudaError on a runtime
/// failure, Error for a CUDA device in a build without the CUDA backend.
void memcpy_between_devices(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes);

}  // namespace engine

#if defined(Y9_WITH_CUDA)
#include <cuda_runtime_api.h>

namespace engine {
/// Throws CudaError naming `expr`, file:line and cudaGetErrorName/String of `err`.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
/// After a kernel launch: checks cudaGetLastError (throws CudaError) and, when the environment
/// has Y9_SYNC_CHECK=1 (read once), synchronises `stream` so an asynchronous fault is reported
/// by the launch that caused it.
void cuda_check_launch(cudaStream_t stream, const char* file, int line);

/// The compute stream of CUDA device `device`: one non-blocking stream per device, created on
/// first use and kept for the life of the process (it lives in the same process-wide registry
/// as the allocator pools, guide 3.9). Every kernel and memcpy of that device is ordered on this
/// stream, and the caching allocator's blocks belong to it by default: a freed block is reused at
/// once by the next request on the same stream; a block also used on a side stream must be
/// marked with engine::record_stream (tensor.h) so that its reuse waits for an event. Also makes `device` the calling thread's current device (cudaSetDevice only when it
/// differs), so a launch into the returned stream is valid. Throws CudaError (bad index, no GPU).
/// The CUDA DeviceContext's StreamKind::Compute is this stream.
cudaStream_t cuda_stream(int device);

/// The CUDA DeviceContext: the compute stream above plus a host-to-device copy stream and a
/// communication stream (non-blocking, created on first use), events (cudaEventDisableTiming),
/// and the per-device state the CUDA backend attaches (cuBLAS/cuDNN handles, workspace, caches).
class CudaContext final : public DeviceContext {
 public:
  explicit CudaContext(Device device);
  ~CudaContext() override;
  void* stream(StreamKind kind = StreamKind::Compute) override;
  void record(Event& ev, StreamKind kind = StreamKind::Compute) override;
  void wait(const Event& ev, StreamKind kind = StreamKind::Compute) override;
  void synchronize(StreamKind kind = StreamKind::Compute) override;
  void synchronize(const Event& ev) override;

 private:
  cudaStream_t streams_[kNumStreamKinds] = {};
  std::mutex mu_;
};

/// RAII: makes `device` current for the scope, restores the previous device on exit.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int prev_ = -1;
};
}  // namespace engine

#define CUDA_CHECK(expr)                                                   \
  do {                                                                     \
    cudaError_t _y9_err = (expr);                                          \
    if (_y9_err != cudaSuccess)                                            \
      ::engine::throw_cuda_error(_y9_err, #expr, __FILE__, __LINE__);      \
  } while (0)
#define CUDA_CHECK_LAUNCH(stream) ::engine::cuda_check_launch((stream), __FILE__, __LINE__)
#endif
