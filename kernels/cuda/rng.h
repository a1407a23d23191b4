// CUDA Philox fills; same element formulas as the CPU twins (kernels/common/rng.h).
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

namespace kernels::cuda {
void uniform_fill_cuda(float* out, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t offset, float lo, float hi,
                       cudaStream_t stream);
void normal_fill_cuda(float* out, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t offset, float mean, float std,
                      cudaStream_t stream);
}  // namespace kernels::cuda
