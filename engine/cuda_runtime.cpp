// CUDA runtime facts (device count), error helpers, the per-device stream registry, the CUDA
// DeviceContext and copies between devices. Without the CUDA backend only cuda_compiled,
// cuda_device_count, cuda_allocator and CPU<->CPU copies exist (the caching allocator itself is
// in engine/cuda_allocator.cpp).
#include "engine/cuda_runtime.h"

#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/allocator.h"
#include "engine/backend.h"
#include "engine/cuda_memory.h"
#include "engine/error.h"
#include "engine/tensor.h"

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

std::string cuda_unavailable_reason(int index) {
#if defined(Y9_WITH_CUDA)
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error state
    const std::string what = detail::concat("cudaGetDeviceCount: ", cudaGetErrorName(err), ", ", cudaGetErrorString(err));
    if (err == cudaErrorNoDevice) return "no CUDA device is present (" + what + ")";
    if (err == cudaErrorInsufficientDriver)
      return "the NVIDIA driver is missing or older than this build's CUDA runtime (" + what + ")";
    return "CUDA cannot be initialised (" + what + ")";
  }
  const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible = vis ? detail::concat(", CUDA_VISIBLE_DEVICES=", vis) : std::string();
  if (n == 0) return "no CUDA device is visible" + visible;
  if (index < 0 || index >= n)
    return detail::concat("there is no CUDA device ", index, ": ", n, " device(s) visible (0-", n - 1, ")", visible);
  return "";
#else
  (void)index;
  return "this build has no CUDA backend (it was configured without nvcc on PATH)";
#endif
}

CudaMemoryInfo cuda_memory_info(int index) {
#if defined(Y9_WITH_CUDA)
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) {
    cudaGetLastError();
    prev = -1;
  }
  const std::string why = cuda_unavailable_reason(index);
  Y9_CHECK_T(CudaError, why.empty(), "cuda:", index, ": ", why);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  if (prev != index) CUDA_CHECK(cudaSetDevice(index));
  size_t free_b = 0, total_b = 0;
  const cudaError_t err = cudaMemGetInfo(&free_b, &total_b);
  if (prev >= 0 && prev != index) cudaSetDevice(prev);
  if (err != cudaSuccess) throw_cuda_error(err, "cudaMemGetInfo", __FILE__, __LINE__);
  CudaMemoryInfo m;
  m.name = prop.name;
  m.total_bytes = static_cast<int64_t>(total_b);
  m.free_bytes = static_cast<int64_t>(free_b);
  return m;
#else
  Y9_THROW(Error, "cuda:", index, " requested but this build has no CUDA backend (configure with nvcc on PATH)");
#endif
}

#if !defined(Y9_WITH_CUDA)
Allocator* cuda_allocator(int index) {
  Y9_THROW(Error, "cuda:", index, " requested but this build has no CUDA backend (configure with nvcc on PATH)");
}

void memcpy_between_devices(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) {
  if (nbytes == 0) return;
  Y9_CHECK(dst_dev.is_cpu() && src_dev.is_cpu(), "copy ", src_dev.str(), " -> ", dst_dev.str(),
           " needs the CUDA backend (this build has none)");
  std::memcpy(dst, src, nbytes);
}

Tensor upload_async(const Tensor& src, Device dev, Event& done) {
  Y9_CHECK(src.defined() && src.device().is_cpu(), "upload_async: the source must be a CPU tensor, got ",
           src.defined() ? src.str() : "undefined");
  done = Event();
  return src.to(dev);  // a CUDA device throws (no backend)
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
// Process-wide registry of per-device compute streams (the allocator-pool exception of guide
// 3.9). Streams are intentionally never destroyed: destroying them during static destruction
// races with the CUDA runtime's own teardown.
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

// --- the CUDA device context -----------------------------------------------------------------------

namespace {
void destroy_event(void* e) {
  if (cudaEventDestroy(static_cast<cudaEvent_t>(e)) != cudaSuccess) {
    cudaGetLastError();
    std::fprintf(stderr, "warning: cudaEventDestroy failed (ignored)\n");
  }
}
}  // namespace

CudaContext::CudaContext(Device device) : DeviceContext(device) {}

CudaContext::~CudaContext() {
  // Contexts live for the process; the side streams are left to the driver's teardown, like the
  // compute stream (destroying streams during static destruction races with the runtime).
}

void* CudaContext::stream(StreamKind kind) {
  const int dev = device().index;
  if (kind == StreamKind::Compute) return cuda_stream(dev);
  std::lock_guard<std::mutex> lock(mu_);
  cudaStream_t& s = streams_[static_cast<int>(kind)];
  if (!s) {
    CudaDeviceGuard g(dev);
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  return s;
}

void CudaContext::record(Event& ev, StreamKind kind) {
  CudaDeviceGuard g(device().index);
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  set_native(ev, device(), e, &destroy_event);
  CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream(kind))));
}

void CudaContext::wait(const Event& ev, StreamKind kind) {
  if (!ev.native()) return;
  CudaDeviceGuard g(device().index);
  CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream(kind)), static_cast<cudaEvent_t>(ev.native()), 0));
}

void CudaContext::synchronize(StreamKind kind) {
  CudaDeviceGuard g(device().index);
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream(kind))));
}

void CudaContext::synchronize(const Event& ev) {
  if (!ev.native()) return;
  CudaDeviceGuard g(device().index);
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(ev.native())));
}

// --- copies between devices --------------------------------------------------------------------------

void memcpy_between_devices(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  if (dst_dev.is_cuda() && src_dev.is_cpu()) {  // H2D
    CudaDeviceGuard g(dst_dev.index);
    cudaStream_t s = cuda_stream(dst_dev.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  if (dst_dev.is_cpu() && src_dev.is_cuda()) {  // D2H
    CudaDeviceGuard g(src_dev.index);
    cudaStream_t s = cuda_stream(src_dev.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  if (dst_dev.index == src_dev.index) {  // D2D, one device
    CudaDeviceGuard g(dst_dev.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, cuda_stream(dst_dev.index)));
    return;
  }
  // D2D across devices: the source's pending writes must land before the peer copy reads it.
  {
    CudaDeviceGuard g(src_dev.index);
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(src_dev.index)));
  }
  CudaDeviceGuard g(dst_dev.index);
  CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, nbytes, cuda_stream(dst_dev.index)));
}

Tensor upload_async(const Tensor& src, Device dev, Event& done) {
  Y9_CHECK(src.defined() && src.device().is_cpu(), "upload_async: the source must be a CPU tensor, got ",
           src.defined() ? src.str() : "undefined");
  done = Event();
  if (dev.is_cpu()) return src.to(dev);
  // Not src.contiguous(): a temporary copy would be freed while the copy reads it.
  Y9_CHECK(src.is_contiguous(), "upload_async: the source must be contiguous, got strides ",
           shape_str(src.strides()), " for ", src.str());
  const Tensor& host = src;
  Tensor out = Tensor::empty(host.shape(), host.dtype(), dev);
  const size_t nbytes = static_cast<size_t>(host.numel()) * dtype_size(host.dtype());
  if (nbytes == 0) return out;
  DeviceContext& ctx = backend(DeviceType::CUDA).context(dev);
  // The new block may be one that kernels queued on the compute stream still read or write (the
  // caching allocator reuses a freed block at once on its stream): the copy waits for them.
  Event compute_point;
  ctx.record(compute_point, StreamKind::Compute);
  ctx.wait(compute_point, StreamKind::HostToDevice);
  {
    CudaDeviceGuard g(dev.index);
    CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), host.data_ptr(), nbytes, cudaMemcpyHostToDevice,
                               static_cast<cudaStream_t>(ctx.stream(StreamKind::HostToDevice))));
  }
  ctx.record(done, StreamKind::HostToDevice);
  ctx.wait(done, StreamKind::Compute);  // later kernels see the data; the host does not block
  record_stream(out, StreamKind::HostToDevice);
  return out;
}

#endif  // Y9_WITH_CUDA

}  // namespace engine
