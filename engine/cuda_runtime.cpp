// CUDA runtime facts (device count), error helpers, the per-device stream registry and
// memcpy_any. Without the CUDA backend only cuda_compiled/cuda_device_count/cuda_allocator
// exist and report "no GPU" (the caching allocator itself is in engine/cuda_allocator.cpp).
#include "engine/cuda_runtime.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/allocator.h"
#include "engine/error.h"

#if defined(Y9_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace engine {

bool cuda_compiled() {
#if defined(Y9_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if defined(Y9_WITH_CUDA)
  int n = 0;
  // Without a driver this returns an error (not 0 devices): any error means "no GPU".
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error state
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

#if !defined(Y9_WITH_CUDA)
Allocator* cuda_allocator(int index) {
  Y9_THROW(Error, "cuda:", index, " requested but this build has no CUDA backend (configure with nvcc on PATH)");
}
#else

// --- errors ---------------------------------------------------------------------------------

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  throw CudaError(detail::concat("CUDA error ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)), expr, file,
                  line);
}

namespace {
bool sync_check_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("Y9_SYNC_CHECK");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}
}  // namespace

void cuda_check_launch(cudaStream_t stream, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, "kernel launch", file, line);
  if (sync_check_enabled()) {
    err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) throw_cuda_error(err, "cudaStreamSynchronize after launch (Y9_SYNC_CHECK=1)", file, line);
  }
}

// --- device guard and streams ------------------------------------------------------------------

CudaDeviceGuard::CudaDeviceGuard(int device) {
  CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) CUDA_CHECK(cudaSetDevice(device));
}
CudaDeviceGuard::~CudaDeviceGuard() {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_ && prev_ >= 0) cudaSetDevice(prev_);  // never throws
}

namespace {
// Process-wide registry of per-device streams (the allocator-pool exception of guide 3.9).
// Streams are intentionally never destroyed: destroying them during static destruction races
// with the CUDA runtime's own teardown.
struct StreamRegistry {
  std::mutex mu;
  std::vector<cudaStream_t> streams;
};
StreamRegistry& stream_registry() {
  static StreamRegistry* r = new StreamRegistry();
  return *r;
}
}  // namespace

cudaStream_t cuda_stream(int device) {
  int cur = -1;
  CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device) CUDA_CHECK(cudaSetDevice(device));
  auto& reg = stream_registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  if (reg.streams.empty()) {
    int n = cuda_device_count();
    Y9_CHECK_T(CudaError, n > 0, "cuda:", device, " requested but no CUDA device is visible");
    reg.streams.assign(static_cast<size_t>(n), nullptr);
  }
  Y9_CHECK_T(CudaError, device >= 0 && device < static_cast<int>(reg.streams.size()), "cuda:", device,
             " out of range (", reg.streams.size(), " devices)");
  cudaStream_t& s = reg.streams[static_cast<size_t>(device)];
  if (!s) CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

#endif  // Y9_WITH_CUDA

}  // namespace engine

#if defined(Y9_WITH_CUDA)
namespace kernels::cuda {

cudaStream_t current_stream(int device) { return engine::cuda_stream(device); }

void memcpy_any(void* dst, engine::Device dst_dev, const void* src, engine::Device src_dev, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  if (dst_dev.is_cuda() && src_dev.is_cpu()) {  // H2D
    engine::CudaDeviceGuard g(dst_dev.index);
    cudaStream_t s = engine::cuda_stream(dst_dev.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  if (dst_dev.is_cpu() && src_dev.is_cuda()) {  // D2H
    engine::CudaDeviceGuard g(src_dev.index);
    cudaStream_t s = engine::cuda_stream(src_dev.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  if (dst_dev.index == src_dev.index) {  // D2D, one device
    engine::CudaDeviceGuard g(dst_dev.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, engine::cuda_stream(dst_dev.index)));
    return;
  }
  // D2D across devices: the source's pending writes must land before the peer copy reads it.
  {
    engine::CudaDeviceGuard g(src_dev.index);
    CUDA_CHECK(cudaStreamSynchronize(engine::cuda_stream(src_dev.index)));
  }
  engine::CudaDeviceGuard g(dst_dev.index);
  CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, nbytes, engine::cuda_stream(dst_dev.index)));
}

}  // namespace kernels::cuda
#endif
