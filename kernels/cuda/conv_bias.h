// The bias kernels of the CUDA convolution entries (kernels/cuda/conv_bias.cu). Host-callable;
// both queue work on `stream` and read nothing back.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/dtype.h"

namespace kernels::cuda {

/// y [n, c, hw] (contiguous, device) += bias [c] broadcast over n and hw. dtype F32, F64, F16 or
/// BF16 (F16/BF16 add in float). Throws ShapeError for another dtype.
void conv_bias_add(cudaStream_t stream, engine::DType dt, void* y, const void* bias, int64_t n, int64_t c,
                   int64_t hw);

/// dbias [c] = sum of dy [n, c, hw] over n and hw (overwrites), accumulated in float (double for
/// F64) in a fixed order: the same bits on every run. Throws ShapeError for a non-float dtype.
void conv_bias_grad(cudaStream_t stream, engine::DType dt, const void* dy, void* dbias, int64_t n, int64_t c,
                    int64_t hw);

}  // namespace kernels::cuda
