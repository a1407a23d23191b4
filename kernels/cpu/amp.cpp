// CPU twins of the AMP loss-scaling entries (kernels/common/amp.h): amp_unscale over the ranges
// of a flat F32 gradient buffer (threaded over fixed element blocks for large ranges; the result
// is pointwise plus an OR, so it does not depend on the thread count) and amp_update_scale.
#include <algorithm>

#include "kernels/common/amp.h"

namespace kernels::cpu {

namespace {

constexpr int64_t kGrain = 1 << 15;  // below this many elements threading costs more than it saves

void amp_unscale(engine::DeviceContext&, float* g, const FlatRange* ranges, int64_t n_ranges, const float* inv_scale,
                 float* found_inf) {
  const float inv = *inv_scale;
  bool any = false;
  for (int64_t r = 0; r < n_ranges; ++r) {
    float* p = g + ranges[r].offset;
    const int64_t n = ranges[r].n;
    bool found = false;
#pragma omp parallel for schedule(static) reduction(|| : found) if (n > kGrain)
    for (int64_t i = 0; i < n; ++i) {
      bool nf = false;
      p[i] = amp_unscale_value(p[i], inv, nf);
      found = found || nf;
    }
    any = any || found;
  }
  if (any) *found_inf = 1.f;
}

void amp_update_scale(engine::DeviceContext&, float* scale, int32_t* growth_tracker, const float* found_inf,
                      double growth_factor, double backoff_factor, int32_t growth_interval) {
  amp_update_scale_value(*scale, *growth_tracker, *found_inf, growth_factor, backoff_factor, growth_interval);
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  const engine::DTypeSet f32{engine::DType::F32};
  b.add(kAmpUnscale, &amp_unscale, f32);
  b.add(kAmpUpdateScale, &amp_update_scale, f32);
}

}  // namespace kernels::cpu
