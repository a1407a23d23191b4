// Element math of the optimizer updates (SGD with momentum/nesterov, Adam/AdamW incl. amsgrad,
// Lion), of the EMA blend and of gradient clipping, shared by the CPU twins (kernels/cpu/optim.cpp) and a future fused
// CUDA optimizer kernel, and their kernel entries over flat buffers. All math in FP32 in the
// order PyTorch 1.13's single-tensor CPU paths use, so one step reproduces torch.optim to
// rounding.
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/hd.h"
#include "kernels/common/elementwise.h"

namespace kernels {

/// Scalars of one SGD step (torch.optim.SGD, PyTorch 1.13 `_single_tensor_sgd`).
struct SgdScalars {
  float lr = 0.f;
  float momentum = 0.f;
  float one_minus_dampening = 1.f;  ///< 1 - dampening computed in double
  float weight_decay = 0.f;
  bool nesterov = false;
  bool first_step = false;  ///< momentum buffer not yet initialised: buf = d_p (clone)
};

/// One SGD element update. p, buf updated in place; g is the (clipped, unscaled) gradient.
///   d_p = g + wd*p;  buf = first ? d_p : momentum*buf + (1-dampening)*d_p;
///   d_p = nesterov ? d_p + momentum*buf : buf;  p -= lr*d_p.   (momentum 0: p -= lr*d_p.)
Y9_HD void sgd_update(float& p, float g, float& buf, const SgdScalars& s) {
  float d_p = s.weight_decay != 0.f ? g + s.weight_decay * p : g;
  if (s.momentum != 0.f) {
    buf = s.first_step ? d_p : buf * s.momentum + s.one_minus_dampening * d_p;
    d_p = s.nesterov ? d_p + s.momentum * buf : buf;
  }
  p = p + (-s.lr) * d_p;
}

/// Scalars of one Adam/AdamW step (PyTorch 1.13 `_single_tensor_adam(w)`), step = t >= 1.
struct AdamScalars {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float one_minus_beta1 = 0.1f;    ///< 1 - beta1 computed in double (Python scalar semantics)
  float one_minus_beta2 = 0.001f;  ///< 1 - beta2 computed in double
  float eps = 1e-8f;
  float weight_decay = 0.f;
  bool decoupled = false;     ///< AdamW: p *= decay_factor before the update; Adam: g += wd*p
  float decay_factor = 1.f;   ///< AdamW: 1 - lr*wd computed in double
  bool amsgrad = false;
  float step_size = 0.f;              ///< lr / (1 - beta1^t), computed in double by the caller
  float bias_correction2_sqrt = 1.f;  ///< sqrt(1 - beta2^t), computed in double by the caller
};

/// One Adam/AdamW element update; m = exp_avg, v = exp_avg_sq, vmax = max_exp_avg_sq (amsgrad).
Y9_HD void adam_update(float& p, float g, float& m, float& v, float& vmax, const AdamScalars& s) {
  if (s.decoupled) {
    p = p * s.decay_factor;
  } else if (s.weight_decay != 0.f) {
    g = g + s.weight_decay * p;
  }
  m = m * s.beta1 + s.one_minus_beta1 * g;
  v = v * s.beta2 + s.one_minus_beta2 * g * g;
  float vv = v;
  if (s.amsgrad) {
    vmax = vmax > v ? vmax : v;
    vv = vmax;
  }
  const float denom = k_sqrt(vv) / s.bias_correction2_sqrt + s.eps;
  p = p + (-s.step_size) * (m / denom);
}

/// Scalars of one Lion step (official utils/lion.py, after lucidrains/lion-pytorch).
struct LionScalars {
  float lr = 0.f;
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float one_minus_beta1 = 0.1f;   ///< 1 - beta1 computed in double
  float one_minus_beta2 = 0.01f;  ///< 1 - beta2 computed in double
  float decay_factor = 1.f;       ///< 1 - lr*weight_decay computed in double
};

/// One Lion element update: p *= 1 - lr*wd; u = beta1*m + (1-beta1)*g; p -= lr*sign(u);
/// m = beta2*m + (1-beta2)*g.
Y9_HD void lion_update(float& p, float g, float& m, const LionScalars& s) {
  p = p * s.decay_factor;
  const float u = m * s.beta1 + g * s.one_minus_beta1;
  const float sgn = u > 0.f ? 1.f : (u < 0.f ? -1.f : 0.f);
  p = p + (-s.lr) * sgn;
  m = m * s.beta2 + s.one_minus_beta2 * g;
}

/// EMA blend as official ModelEMA.update: `v *= d; v += (1-d) * m` in FP32 (d and 1-d are
/// rounded to float by the caller, as PyTorch does for a Python scalar).
Y9_HD float ema_blend(float v, float m, float d, float one_minus_d) { return v * d + one_minus_d * m; }

/// Global L2 norm of torch.nn.utils.clip_grad_norm_ (PyTorch 1.13) from the per-parameter sums of
/// squares sums[n] (double): each per-parameter norm float(sqrt(sums[r])) (torch.norm gives an
/// FP32 tensor), their squares summed in double in order, then float(sqrt(sum)). n == 0 gives 0.
/// Never fused into an FMA: the device result equals the host's bit for bit.
Y9_HD float global_norm_from_sums(const double* sums, int64_t n) {
  double sum = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const double nr = k_round_to<float>(k_sqrt(sums[r]));
    sum = k_add_rn(sum, k_mul_rn(nr, nr));
  }
  return static_cast<float>(k_sqrt(sum));
}

/// clip_grad_norm_'s coefficient in FP32: max_norm / (total_norm + 1e-6); the gradients are
/// multiplied by it when !(coef >= 1) (also when NaN: torch.clamp(max=1) keeps a NaN).
Y9_HD float clip_coef(float total_norm, float max_norm) { return max_norm / (total_norm + 1e-6f); }

// --- kernel entries over flat buffers ------------------------------------------------------------
// A fused step runs over several ranges of flat buffers at once (one call per parameter group):
// every pointer is the START of a flat buffer and ranges[r] = (offset, n) in elements, the same
// offsets in every buffer (parameters, gradients and state share one layout). Padding elements
// between segments are zero in every buffer and stay zero under every update below.

/// One range of a flat buffer.
struct FlatRange {
  int64_t offset = 0;
  int64_t n = 0;
};

/// SGD (sgd_update) over the ranges; buf may be null only when s.momentum == 0.
using SgdStepFn = void (*)(engine::DeviceContext& ctx, float* p, const float* g, float* buf,
                           const FlatRange* ranges, int64_t n_ranges, const SgdScalars& s);
inline engine::KernelKey<SgdStepFn> kSgdStep{"sgd_step"};

/// Adam/AdamW (adam_update) over the ranges; vmax may be null unless s.amsgrad.
using AdamStepFn = void (*)(engine::DeviceContext& ctx, float* p, const float* g, float* m, float* v, float* vmax,
                            const FlatRange* ranges, int64_t n_ranges, const AdamScalars& s);
inline engine::KernelKey<AdamStepFn> kAdamStep{"adam_step"};

/// Lion (lion_update) over the ranges.
using LionStepFn = void (*)(engine::DeviceContext& ctx, float* p, const float* g, float* m,
                            const FlatRange* ranges, int64_t n_ranges, const LionScalars& s);
inline engine::KernelKey<LionStepFn> kLionStep{"lion_step"};

/// ema[i] = ema_blend(ema[i], model[i], d, one_minus_d) for i < n (a whole flat buffer).
using EmaUpdateFn = void (*)(engine::DeviceContext& ctx, float* ema, const float* model, int64_t n, float d,
                             float one_minus_d);
inline engine::KernelKey<EmaUpdateFn> kEmaUpdate{"ema_update"};

/// out[r] = sum of g[i]^2 over range r (in double, fixed-size blocks in index order: the result
/// does not depend on the thread count). out is F64 in the device's memory.
using SumSquaresFn = void (*)(engine::DeviceContext& ctx, const float* g, const FlatRange* ranges, int64_t n_ranges,
                              double* out);
inline engine::KernelKey<SumSquaresFn> kSumSquares{"sum_squares"};

/// norm[0] = global_norm_from_sums(sums, n_ranges): sums [n_ranges] F64 (kSumSquares' output) and
/// norm [1] F32, both in the device's memory (n_ranges may be 0: norm 0). One thread on CUDA, no
/// host reads; bitwise equal to the host arithmetic.
using GradNormFromSumsFn = void (*)(engine::DeviceContext& ctx, const double* sums, int64_t n_ranges, float* norm);
inline engine::KernelKey<GradNormFromSumsFn> kGradNormFromSums{"grad_norm_from_sums"};

/// g[i] *= coef in FP32 for i < n when !(coef >= 1) (NaN included), coef = clip_coef(norm[0],
/// max_norm), with norm [1] F32 read on the device (no host synchronisation); g [n] F32 in the
/// device's memory, left untouched when coef >= 1.
using ClipByNormFn = void (*)(engine::DeviceContext& ctx, float* g, int64_t n, const float* norm, float max_norm);
inline engine::KernelKey<ClipByNormFn> kClipByNorm{"clip_by_norm"};

}  // namespace kernels
