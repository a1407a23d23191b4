// Helpers for CUDA runtime calls: the CUDA_CHECK family of macros (guide/style.md 3.5).
// Include only from code compiled with Y9_WITH_CUDA.
#pragma once
#include "engine/error.h"

#if defined(Y9_WITH_CUDA)
#include <cuda_runtime.h>

namespace engine {
/// Throws CudaError naming `expr`, file:line and cudaGetErrorName/String of `err`.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
/// After a kernel launch: checks cudaGetLastError and, with Y9_SYNC_CHECK=1, synchronises `stream`.
void cuda_check_launch(cudaStream_t stream, const char* file, int line);
}  // namespace engine

#define CUDA_CHECK(expr)                                                   \
  do {                                                                     \
    cudaError_t _y9_err = (expr);                                          \
    if (_y9_err != cudaSuccess)                                            \
      ::engine::throw_cuda_error(_y9_err, #expr, __FILE__, __LINE__);      \
  } while (0)
#define CUDA_CHECK_LAUNCH(stream) ::engine::cuda_check_launch((stream), __FILE__, __LINE__)
#endif
