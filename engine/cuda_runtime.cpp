// CUDA runtime facts (device count) and the CUDA allocator entry point. Without the CUDA
// backend these report "no GPU" and throw on device allocation.
#include "engine/allocator.h"
#include "engine/cuda_runtime.h"
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
#endif

}  // namespace engine
