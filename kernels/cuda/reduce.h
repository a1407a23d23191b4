// CUDA row reductions (twin of kernels/cpu/reduce.h). Include only with Y9_WITH_CUDA.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "kernels/cuda/stream.h"

namespace kernels::cuda {

/// out[r] = scale * sum_{i<n} in[r*n + i] for r < rows. `in` is contiguous [rows, n], `out`
/// contiguous [rows], both `dtype` in device memory: F32/F16/BF16 accumulate in float, F64 in
/// double (the CPU twin accumulates in double, so F32 results differ by float rounding).
/// n == 0 writes zeros. Deterministic and bitwise reproducible: a fixed per-row tree order
/// (one warp per row for n <= 1024, else one block per row), no atomics. Asynchronous on
/// `stream`; throws ShapeError for other dtypes, CudaError on launch failure.
void sum_rows_cuda(const void* in, void* out, engine::DType dtype, int64_t rows, int64_t n, double scale,
                   cudaStream_t stream);

}  // namespace kernels::cuda
