// Element formulas of the Philox-based fills, shared by the CPU twin and the CUDA kernel.
#pragma once
#include <cstdint>

#include "engine/philox.h"
#include "kernels/common/elementwise.h"

namespace kernels {

/// Element i of a uniform fill U[lo, hi) at block offset `offset` of stream (seed, stream_id).
Y9_HD float philox_uniform_elem(uint64_t seed, uint64_t stream_id, uint64_t offset, uint64_t i, float lo, float hi) {
  return lo + (hi - lo) * engine::uint_to_unit_float(engine::philox_draw(seed, stream_id, offset, i));
}

/// Element i of a standard-normal fill: Box-Muller on draws (2*(i/2), 2*(i/2)+1); even i takes
/// the cosine branch, odd i the sine branch.
Y9_HD float philox_normal_elem(uint64_t seed, uint64_t stream_id, uint64_t offset, uint64_t i, float mean, float std) {
  uint64_t p = i / 2;
  float u1 = engine::uint_to_unit_float_open0(engine::philox_draw(seed, stream_id, offset, 2 * p));
  float u2 = engine::uint_to_unit_float(engine::philox_draw(seed, stream_id, offset, 2 * p + 1));
  float r = k_sqrt(-2.0f * k_log(u1));
  float theta = 6.2831853071795864769f * u2;
  float z = (i % 2 == 0) ? r * cosf(theta) : r * sinf(theta);
  return mean + std * z;
}

}  // namespace kernels
