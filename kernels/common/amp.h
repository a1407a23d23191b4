// Mixed precision (AMP) dynamic loss scaling, issue 11: the element math and the kernel entries
// of PyTorch's GradScaler (torch/cuda/amp/grad_scaler.py, PyTorch 1.13) over flat F32 gradient
// buffers, shared by the CPU twins (kernels/cpu/amp.cpp) and the CUDA kernels (kernels/cuda/amp.cu):
//   amp_unscale      = torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
//   amp_update_scale = torch._amp_update_scale_(scale, growth_tracker, found_inf, growth_factor,
//                                               backoff_factor, growth_interval)
// Scale, inverse scale, found_inf and the growth tracker live in the device's memory: neither
// entry reads anything back to the host, so a whole AMP step stays on the device until the one
// found_inf read of GradScaler::step (PyTorch: `found_inf.item()` in scaler.step).
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/hd.h"
#include "kernels/common/optim.h"

namespace kernels {

/// One gradient value of amp_unscale: returns g * inv_scale (g unchanged when inv_scale == 1, as
/// PyTorch) and sets `nonfinite` when g is inf or NaN (checked before the multiply).
Y9_HD float amp_unscale_value(float g, float inv_scale, bool& nonfinite) {
  // g - g is NaN exactly when g is inf or NaN (no <cmath> isfinite needed on the device).
  nonfinite = !(g - g == 0.f);
  return inv_scale == 1.f ? g : g * inv_scale;
}

/// torch._amp_update_scale_ on one (scale, growth_tracker) pair:
///   found_inf != 0: scale *= backoff_factor; growth_tracker = 0;
///   else: ++growth_tracker; when it reaches growth_interval: scale *= growth_factor (kept only
///   when the new scale is finite), growth_tracker = 0.
/// The products are computed in double and rounded to float (PyTorch's float * double).
Y9_HD void amp_update_scale_value(float& scale, int32_t& growth_tracker, float found_inf, double growth_factor,
                                  double backoff_factor, int32_t growth_interval) {
  if (found_inf != 0.f) {
    scale = static_cast<float>(static_cast<double>(scale) * backoff_factor);
    growth_tracker = 0;
    return;
  }
  const int32_t successful = growth_tracker + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale) * growth_factor);
    if (grown - grown == 0.f) scale = grown;  // finite
    growth_tracker = 0;
  } else {
    growth_tracker = successful;
  }
}

/// g[i] = amp_unscale_value(g[i], *inv_scale) for every i of every range of the flat F32 buffer
/// `g` (pointer to its start; FlatRange as the optimizer entries), and *found_inf = 1 when any of
/// them was inf/NaN (never cleared: the caller zeroes it once per step, so several calls OR into
/// one flag). `g`, `inv_scale` and `found_inf` are device memory; `ranges` is host memory.
using AmpUnscaleFn = void (*)(engine::DeviceContext& ctx, float* g, const FlatRange* ranges, int64_t n_ranges,
                              const float* inv_scale, float* found_inf);
inline engine::KernelKey<AmpUnscaleFn> kAmpUnscale{"amp_unscale"};

/// amp_update_scale_value(*scale, *growth_tracker, *found_inf, ...) on the device (one element
/// each, device memory).
using AmpUpdateScaleFn = void (*)(engine::DeviceContext& ctx, float* scale, int32_t* growth_tracker,
                                  const float* found_inf, double growth_factor, double backoff_factor,
                                  int32_t growth_interval);
inline engine::KernelKey<AmpUpdateScaleFn> kAmpUpdateScale{"amp_update_scale"};

}  // namespace kernels
