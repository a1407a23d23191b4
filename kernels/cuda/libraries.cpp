// CUDA library state of a device context (kernels/cuda/libraries.h).
#include "kernels/cuda/libraries.h"

#include <cstdio>

#include "engine/cuda_runtime.h"

namespace kernels::cuda {

void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line) {
  throw engine::CublasError(engine::detail::concat("cuBLAS error ", static_cast<int>(st), " (", cublasGetStatusName(st),
                                                   ": ", cublasGetStatusString(st), ")"),
                            expr, file, line);
}

#if defined(Y9_WITH_CUDNN)
void throw_cudnn_error(cudnnStatus_t st, const char* expr, const char* file, int line) {
  throw engine::CudnnError(engine::detail::concat("cuDNN error ", static_cast<int>(st), ": ", cudnnGetErrorString(st)),
                           expr, file, line);
}
#endif

CudaLibraries::CudaLibraries(engine::DeviceContext& ctx) : device_(ctx.device()) {
  engine::CudaDeviceGuard g(device_.index);
  auto stream = static_cast<cudaStream_t>(ctx.stream(engine::StreamKind::Compute));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, stream));
#if defined(Y9_WITH_CUDNN)
  CUDNN_CHECK(cudnnCreate(&cudnn_));
  CUDNN_CHECK(cudnnSetStream(cudnn_, stream));
#endif
}

CudaLibraries::~CudaLibraries() {
  // Never throws: a failure to destroy a handle at exit is only reported.
  if (cublas_ && cublasDestroy(cublas_) != CUBLAS_STATUS_SUCCESS) std::fprintf(stderr, "warning: cublasDestroy failed\n");
#if defined(Y9_WITH_CUDNN)
  if (cudnn_ && cudnnDestroy(cudnn_) != CUDNN_STATUS_SUCCESS) std::fprintf(stderr, "warning: cudnnDestroy failed\n");
#endif
}

void* CudaLibraries::workspace(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mu);
  if (nbytes > workspace_bytes())
    ws_ = engine::Tensor::empty({static_cast<int64_t>(nbytes)}, engine::DType::U8, device_);
  return ws_.defined() ? ws_.data_ptr() : nullptr;
}

}  // namespace kernels::cuda
