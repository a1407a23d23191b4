// CPU twins of the fused optimizer, EMA, gradient-norm and clipping entries (kernels/common/optim.h): loops
// over the shared element math, over a list of ranges of flat buffers. One parallel region per
// call spreads the concatenated ranges over the threads by element index, so a step over
// hundreds of small parameter segments costs one fork/join, and the results (pointwise) do not
// depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/common/optim.h"

namespace kernels::cpu {

namespace {

constexpr int64_t kGrain = 1 << 15;  // below this many elements threading costs more than it saves

/// Calls f(i) for every element index i of every range, threaded over the concatenation.
template <typename F>
void for_each_in_ranges(const FlatRange* ranges, int64_t n_ranges, F f) {
  std::vector<int64_t> start(static_cast<size_t>(n_ranges) + 1, 0);
  for (int64_t r = 0; r < n_ranges; ++r) start[r + 1] = start[r] + ranges[r].n;
  const int64_t total = start[static_cast<size_t>(n_ranges)];
  const int threads = total > kGrain ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t lo = total * t / nt, hi = total * (t + 1) / nt;
    int64_t r = std::upper_bound(start.begin(), start.end(), lo) - start.begin() - 1;
    for (int64_t k = lo; k < hi && r < n_ranges;) {
      const int64_t end = std::min(hi, start[r + 1]);
      const int64_t base = ranges[r].offset - start[r];
      for (; k < end; ++k) f(base + k);
      ++r;
    }
  }
}

void sgd_step(engine::DeviceContext&, float* p, const float* g, float* buf, const FlatRange* ranges,
              int64_t n_ranges, const SgdScalars& s) {
  if (s.momentum == 0.f) {
    for_each_in_ranges(ranges, n_ranges, [&](int64_t i) {
      float dummy = 0.f;
      sgd_update(p[i], g[i], dummy, s);
    });
    return;
  }
  for_each_in_ranges(ranges, n_ranges, [&](int64_t i) { sgd_update(p[i], g[i], buf[i], s); });
}

void adam_step(engine::DeviceContext&, float* p, const float* g, float* m, float* v, float* vmax,
               const FlatRange* ranges, int64_t n_ranges, const AdamScalars& s) {
  if (!s.amsgrad) {
    for_each_in_ranges(ranges, n_ranges, [&](int64_t i) {
      float unused = 0.f;
      adam_update(p[i], g[i], m[i], v[i], unused, s);
    });
    return;
  }
  for_each_in_ranges(ranges, n_ranges, [&](int64_t i) { adam_update(p[i], g[i], m[i], v[i], vmax[i], s); });
}

void lion_step(engine::DeviceContext&, float* p, const float* g, float* m, const FlatRange* ranges, int64_t n_ranges,
               const LionScalars& s) {
  for_each_in_ranges(ranges, n_ranges, [&](int64_t i) { lion_update(p[i], g[i], m[i], s); });
}

void ema_update(engine::DeviceContext&, float* ema, const float* model, int64_t n, float d, float one_minus_d) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) ema[i] = ema_blend(ema[i], model[i], d, one_minus_d);
}

double sum_squares_range(const float* g, int64_t n) {
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

void sum_squares(engine::DeviceContext&, const float* g, const FlatRange* ranges, int64_t n_ranges, double* out) {
  // Small ranges (most segments) run one per thread; large ones split into blocks inside.
  std::vector<int64_t> small, large;
  for (int64_t r = 0; r < n_ranges; ++r) (ranges[r].n > (1 << 14) ? large : small).push_back(r);
#pragma omp parallel for schedule(dynamic, 16) if (small.size() > 64)
  for (size_t k = 0; k < small.size(); ++k) {
    const FlatRange& rg = ranges[small[k]];
    out[small[k]] = sum_squares_range(g + rg.offset, rg.n);
  }
  for (int64_t r : large) out[r] = sum_squares_range(g + ranges[r].offset, ranges[r].n);
}

void grad_norm_from_sums(engine::DeviceContext&, const double* sums, int64_t n_ranges, float* norm) {
  *norm = global_norm_from_sums(sums, n_ranges);
}

void clip_by_norm(engine::DeviceContext&, float* g, int64_t n, const float* norm, float max_norm) {
  const float coef = clip_coef(*norm, max_norm);
  if (coef >= 1.0f) return;
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] * coef;
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  const engine::DTypeSet f32{engine::DType::F32};
  b.add(kSgdStep, &sgd_step, f32);
  b.add(kAdamStep, &adam_step, f32);
  b.add(kLionStep, &lion_step, f32);
  b.add(kEmaUpdate, &ema_update, f32);
  b.add(kSumSquares, &sum_squares, f32);
  b.add(kGradNormFromSums, &grad_norm_from_sums, f32);
  b.add(kClipByNorm, &clip_by_norm, f32);
}

}  // namespace kernels::cpu
