// CPU twins of the Philox fills: each element is independent, so the loop is threaded freely
// and still gives the same numbers for any thread count.
#include "engine/core_kernels.h"
#include "kernels/common/rng.h"

namespace kernels::cpu {

namespace {

void uniform_fill(engine::DeviceContext&, float* out, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t offset,
                  float lo, float hi) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = philox_uniform_elem(seed, stream_id, offset, static_cast<uint64_t>(i), lo, hi);
}

void normal_fill(engine::DeviceContext&, float* out, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t offset,
                 float mean, float std) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = philox_normal_elem(seed, stream_id, offset, static_cast<uint64_t>(i), mean, std);
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(engine::kUniformFill, &uniform_fill, engine::DTypeSet{engine::DType::F32});
  b.add(engine::kNormalFill, &normal_fill, engine::DTypeSet{engine::DType::F32});
}

}  // namespace kernels::cpu
