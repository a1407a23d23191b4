// Per-device library state of the CUDA backend, attached to the CUDA DeviceContext
// (ctx.state<CudaLibraries>()): the cuBLAS and cuDNN handles bound to the context's compute
// stream, one shared workspace sized by the hungriest call (grown, never shrunk: darknet's
// rule), and the cuDNN convolution algorithm cache keyed by shape, dtype and pointer alignment
// (cudnn.benchmark's rule: measure once per key). Plus the CUBLAS_CHECK / CUDNN_CHECK macros (guide 3.5). Host code only.
#pragma once
#include <cublas_v2.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/backend.h"
#include "engine/tensor.h"

#if defined(Y9_WITH_CUDNN)
#include <cudnn.h>
#endif

namespace kernels::cuda {

/// Throws engine::CublasError naming `expr`, file:line and the cuBLAS status.
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line);
#if defined(Y9_WITH_CUDNN)
/// Throws engine::CudnnError naming `expr`, file:line and cudnnGetErrorString.
[[noreturn]] void throw_cudnn_error(cudnnStatus_t st, const char* expr, const char* file, int line);
#endif

/// The library state of one CUDA device. Created on first use by ctx.state<CudaLibraries>();
/// handles are destroyed with the context (the end of the process). Thread-safe through `mu`.
class CudaLibraries {
 public:
  explicit CudaLibraries(engine::DeviceContext& ctx);
  ~CudaLibraries();
  CudaLibraries(const CudaLibraries&) = delete;
  CudaLibraries& operator=(const CudaLibraries&) = delete;

  cublasHandle_t cublas() const { return cublas_; }
#if defined(Y9_WITH_CUDNN)
  cudnnHandle_t cudnn() const { return cudnn_; }
#endif
  /// Device memory of at least `nbytes` bytes from the caching allocator, shared by every call
  /// on the compute stream (calls are ordered on that stream, so sharing is safe). Grows by
  /// reallocation when a call needs more; throws CudaError when out of memory.
  void* workspace(size_t nbytes);
  size_t workspace_bytes() const { return ws_.defined() ? static_cast<size_t>(ws_.numel()) : 0; }

  /// Convolution algorithm cache (cudnn.benchmark's rule: measured once per shape by
  /// kernels/cuda/conv.cpp): key = (direction, dtype, the Conv2dShape geometry, the alignment of
  /// the three data pointers), value = the working algorithms, fastest first, each with its
  /// workspace bytes and the math type cuDNN measured it with (cudnnConvolution*AlgoPerf_t::mathType,
  /// which can differ from the descriptor's: the run sets it back, as PyTorch does).
  using ConvKey = std::array<int64_t, 18>;
  struct ConvAlgo {
    int algo = 0;
    size_t workspace = 0;
    int math = 0;  ///< cudnnMathType_t
  };
  /// Every algorithm the find measured as working, fastest first (kernels/cuda/conv.cpp runs the
  /// first that cuDNN accepts, and drops the ones it refused). Shared and immutable: a call takes
  /// a reference under `mu` (no copy, no allocation per convolution); dropping replaces the list.
  using ConvAlgos = std::vector<ConvAlgo>;
  std::map<ConvKey, std::shared_ptr<const ConvAlgos>> conv_algos;
  std::mutex mu;

 private:
  engine::Device device_;
  cublasHandle_t cublas_ = nullptr;
#if defined(Y9_WITH_CUDNN)
  cudnnHandle_t cudnn_ = nullptr;
#endif
  engine::Tensor ws_;  // U8 [bytes] on the device
};

}  // namespace kernels::cuda

#define CUBLAS_CHECK(expr)                                                            \
  do {                                                                                \
    cublasStatus_t _y9_st = (expr);                                                   \
    if (_y9_st != CUBLAS_STATUS_SUCCESS)                                              \
      ::kernels::cuda::throw_cublas_error(_y9_st, #expr, __FILE__, __LINE__);         \
  } while (0)
#define CUDNN_CHECK(expr)                                                             \
  do {                                                                                \
    auto _y9_st = (expr);                                                             \
    if (_y9_st != CUDNN_STATUS_SUCCESS)                                               \
      ::kernels::cuda::throw_cudnn_error(_y9_st, #expr, __FILE__, __LINE__);          \
  } while (0)
