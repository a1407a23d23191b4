// CPU twins of the optimizer step, EMA blend and gradient-norm kernels over contiguous FP32
// spans (one parameter tensor, or a run of parameters packed in a flat buffer). Element math is
// in kernels/common/optim.h, shared with the CUDA fused optimizer.
#pragma once
#include <cstdint>

#include "kernels/common/optim.h"

namespace kernels::cpu {

/// SGD over n elements: p[i], buf[i] updated in place from g[i] (kernels::sgd_update).
/// buf may be null only when s.momentum == 0. Threaded (OpenMP); bitwise deterministic.
void sgd_step_cpu(float* p, const float* g, float* buf, int64_t n, const SgdScalars& s);

/// Adam/AdamW over n elements (kernels::adam_update). vmax may be null unless s.amsgrad.
void adam_step_cpu(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamScalars& s);

/// Lion over n elements (kernels::lion_update).
void lion_step_cpu(float* p, const float* g, float* m, int64_t n, const LionScalars& s);

/// ema[i] = ema[i]*d + one_minus_d*model[i] (kernels::ema_blend), n elements.
void ema_update_cpu(float* ema, const float* model, int64_t n, float d, float one_minus_d);

/// sum of g[i]^2 over n elements, accumulated in double in a fixed order (deterministic).
double sum_squares_cpu(const float* g, int64_t n);

/// g[i] *= scale over n elements.
void scale_cpu(float* g, int64_t n, float scale);

}  // namespace kernels::cpu
