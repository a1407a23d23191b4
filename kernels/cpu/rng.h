// CPU twins of the Philox fills (see kernels/common/rng.h).
#pragma once
#include <cstdint>

namespace kernels::cpu {
/// out[i] = philox_uniform_elem(..., i) for i < n.
void uniform_fill_cpu(float* out, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t offset, float lo, float hi);
/// out[i] = philox_normal_elem(..., i) for i < n.
void normal_fill_cpu(float* out, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t offset, float mean, float std);
}  // namespace kernels::cpu
