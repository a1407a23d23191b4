// CPU twins of the optimizer kernels: loops over the element math of kernels/common/optim.h.
#include "kernels/cpu/optim.h"

#include <vector>

namespace kernels::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;  // below this many elements threading costs more than it saves
}

// ---------------------------------------------------------------------------------------------

void sgd_step_cpu(float* p, const float* g, float* buf, int64_t n, const SgdScalars& s) {
  if (s.momentum == 0.f) {
    float dummy = 0.f;
#pragma omp parallel for schedule(static) firstprivate(dummy) if (n > kGrain)
    for (int64_t i = 0; i < n; ++i) sgd_update(p[i], g[i], dummy, s);
    return;
  }
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) sgd_update(p[i], g[i], buf[i], s);
}

void adam_step_cpu(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamScalars& s) {
  if (!s.amsgrad) {
#pragma omp parallel for schedule(static) if (n > kGrain)
    for (int64_t i = 0; i < n; ++i) {
      float unused = 0.f;
      adam_update(p[i], g[i], m[i], v[i], unused, s);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) adam_update(p[i], g[i], m[i], v[i], vmax[i], s);
}

void lion_step_cpu(float* p, const float* g, float* m, int64_t n, const LionScalars& s) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) lion_update(p[i], g[i], m[i], s);
}

void ema_update_cpu(float* ema, const float* model, int64_t n, float d, float one_minus_d) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) ema[i] = ema_blend(ema[i], model[i], d, one_minus_d);
}

double sum_squares_cpu(const float* g, int64_t n) {
  // Fixed-size blocks summed in index order: the result does not depend on the thread count.
  constexpr int64_t kBlock = 1 << 14;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  double total = 0.0;
  if (nb <= 1) {
    for (int64_t i = 0; i < n; ++i) total += static_cast<double>(g[i]) * g[i];
    return total;
  }
  std::vector<double> partial(static_cast<size_t>(nb));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t lo = b * kBlock, hi = lo + kBlock < n ? lo + kBlock : n;
    double acc = 0.0;
    for (int64_t i = lo; i < hi; ++i) acc += static_cast<double>(g[i]) * g[i];
    partial[b] = acc;
  }
  for (int64_t b = 0; b < nb; ++b) total += partial[b];
  return total;
}

void scale_cpu(float* g, int64_t n, float scale) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) g[i] *= scale;
}

}  // namespace kernels::cpu
