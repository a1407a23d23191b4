// Y9_HD marks element math shared by the CPU twin and the CUDA kernel (guide/style.md 3.2):
// __host__ __device__ under nvcc, nothing in a plain C++ build.
#pragma once
#if defined(__CUDACC__)
#define Y9_HD __host__ __device__ __forceinline__
#else
#define Y9_HD inline
#endif
