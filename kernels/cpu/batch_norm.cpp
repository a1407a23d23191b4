// CPU BatchNorm2d entries (kernels/common/batch_norm.h) over contiguous NCHW buffers, threaded over
// channels; each channel's reductions run in a fixed order in double, so results are bitwise
// reproducible for any thread count.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/batch_norm.h"
#include "kernels/cpu/dispatch.h"

namespace kernels::cpu {

namespace {

// Per-channel pieces shared by the local and the synchronised paths (one order of operations, so
// that both give bitwise the same result on one rank). Channel `ch` of NCHW `x` is n runs of hw.

// Sum of channel ch, in double, in (b, i) order.
template <typename T>
double channel_sum(const T* x, int64_t n, int64_t c, int64_t hw, int64_t ch) {
  double s = 0.0;
  for (int64_t b = 0; b < n; ++b) {
    const T* p = x + (b * c + ch) * hw;
    for (int64_t i = 0; i < hw; ++i) s += static_cast<double>(p[i]);
  }
  return s;
}

// Sum of squared deviations from `mu` (the second pass: avoids the cancellation of E[x^2] - E[x]^2).
template <typename T>
double channel_sq_dev(const T* x, int64_t n, int64_t c, int64_t hw, int64_t ch, double mu) {
  double ss = 0.0;
  for (int64_t b = 0; b < n; ++b) {
    const T* p = x + (b * c + ch) * hw;
    for (int64_t i = 0; i < hw; ++i) {
      const double d = static_cast<double>(p[i]) - mu;
      ss += d * d;
    }
  }
  return ss;
}

// Backward sums of channel ch: sum dy and sum dy * xhat, xhat = (x - mu) * is.
template <typename T>
void channel_dy_sums(const T* x, const T* dy, int64_t n, int64_t c, int64_t hw, int64_t ch, double mu, double is,
                     double* sdy, double* sdyx) {
  double s0 = 0.0, s1 = 0.0;
  for (int64_t b = 0; b < n; ++b) {
    const T* px = x + (b * c + ch) * hw;
    const T* pd = dy + (b * c + ch) * hw;
    for (int64_t i = 0; i < hw; ++i) {
      const double d = static_cast<double>(pd[i]);
      s0 += d;
      s1 += d * (static_cast<double>(px[i]) - mu) * is;
    }
  }
  *sdy = s0;
  *sdyx = s1;
}

// Whether a pass over an [n, c, hw] tensor is worth a parallel region: below the grain of the
// other CPU loops (nd_iter.h, 32768 elements) waking the threads costs more than the work (the
// small P5 maps of a batch-1 forward). Each channel is computed by one thread either way, so the
// results do not depend on it.
inline bool parallel_work(int64_t n, int64_t c, int64_t hw) { return n * c * hw > 32768; }

// dx of channel ch: a*dy + bx*(x - mean) + k with a = w*is; training: bx = -a*is*sdyx/M,
// k = -a*sdy/M (M the element count of the channel over every rank); eval: bx = k = 0.
// (x - mean) is formed first so that a large mean does not cancel in F32.
template <typename T>
void channel_dx(const T* x, const T* dy, const T* weight, int64_t n, int64_t c, int64_t hw, int64_t ch, double mu,
                double is, bool training, double m, double sdy, double sdyx, T* dx) {
  const double wv = weight ? static_cast<double>(weight[ch]) : 1.0;
  const double a = wv * is;
  const double bx = training && m > 0 ? -a * is * sdyx / m : 0.0;
  const double k = training && m > 0 ? -a * sdy / m : 0.0;
  const T ta = static_cast<T>(a), tb = static_cast<T>(bx), tk = static_cast<T>(k), tmu = static_cast<T>(mu);
  for (int64_t b = 0; b < n; ++b) {
    const T* px = x + (b * c + ch) * hw;
    const T* pd = dy + (b * c + ch) * hw;
    T* q = dx + (b * c + ch) * hw;
#pragma omp simd
    for (int64_t i = 0; i < hw; ++i) q[i] = ta * pd[i] + tb * (px[i] - tmu) + tk;
  }
}

template <typename T>
void batch_norm_stats_cpu(const T* x, int64_t n, int64_t c, int64_t hw, T* mean, T* var_biased) {
  const double m = static_cast<double>(n * hw);
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mu = m > 0 ? channel_sum(x, n, c, hw, ch) / m : 0.0;
    const double ss = channel_sq_dev(x, n, c, hw, ch, mu);
    mean[ch] = static_cast<T>(mu);
    var_biased[ch] = static_cast<T>(m > 0 ? ss / m : 0.0);
  }
}

// Synchronised statistics: per-channel sums and the count, reduced across ranks, then the
// squared deviations from the global mean, reduced again (two-pass, as batch_norm_stats_cpu).
// Returns the global count.
template <typename T>
int64_t batch_norm_stats_sync_cpu(const T* x, int64_t n, int64_t c, int64_t hw, T* mean, T* var_biased,
                                  const BatchNormSync& sync) {
  std::vector<double> buf(static_cast<size_t>(c + 1));
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t ch = 0; ch < c; ++ch) buf[ch] = channel_sum(x, n, c, hw, ch);
  buf[c] = static_cast<double>(n * hw);
  sync.fn(sync.state, buf.data(), c + 1);
  const double m = buf[c];
  std::vector<double> mu(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) mu[ch] = m > 0 ? buf[ch] / m : 0.0;
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t ch = 0; ch < c; ++ch) buf[ch] = channel_sq_dev(x, n, c, hw, ch, mu[ch]);
  sync.fn(sync.state, buf.data(), c);
  for (int64_t ch = 0; ch < c; ++ch) {
    mean[ch] = static_cast<T>(mu[ch]);
    var_biased[ch] = static_cast<T>(m > 0 ? buf[ch] / m : 0.0);
  }
  return static_cast<int64_t>(m);
}

template <typename T>
void batch_norm_forward_cpu(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                            int64_t n, int64_t c, int64_t hw) {
#pragma omp parallel for collapse(2) schedule(static) if (parallel_work(n, c, hw))
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      const T scale = invstd[ch] * (weight ? weight[ch] : T(1));
      const T shift = (bias ? bias[ch] : T(0)) - mean[ch] * scale;
      const T* p = x + (b * c + ch) * hw;
      T* q = y + (b * c + ch) * hw;
#pragma omp simd
      for (int64_t i = 0; i < hw; ++i) q[i] = p[i] * scale + shift;
    }
}

template <typename T>
void batch_norm_backward_cpu(const T* x, const T* dy, const T* mean, const T* invstd, const T* weight,
                             bool training, T* dx, T* dweight, T* dbias, int64_t n, int64_t c, int64_t hw) {
  const double m = static_cast<double>(n * hw);
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mu = static_cast<double>(mean[ch]), is = static_cast<double>(invstd[ch]);
    double sdy = 0.0, sdyx = 0.0;
    channel_dy_sums(x, dy, n, c, hw, ch, mu, is, &sdy, &sdyx);
    if (dweight) dweight[ch] = static_cast<T>(sdyx);
    if (dbias) dbias[ch] = static_cast<T>(sdy);
    if (dx) channel_dx(x, dy, weight, n, c, hw, ch, mu, is, training, m, sdy, sdyx, dx);  // while ch is in cache
  }
}

// Synchronised training backward: local sums (dweight, dbias), then the sums and count reduced
// across ranks for dx.
template <typename T>
void batch_norm_backward_sync_cpu(const T* x, const T* dy, const T* mean, const T* invstd, const T* weight, T* dx,
                                  T* dweight, T* dbias, int64_t n, int64_t c, int64_t hw, const BatchNormSync& sync) {
  std::vector<double> buf(static_cast<size_t>(2 * c + 1));
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t ch = 0; ch < c; ++ch) {
    channel_dy_sums(x, dy, n, c, hw, ch, static_cast<double>(mean[ch]), static_cast<double>(invstd[ch]), &buf[ch],
                    &buf[c + ch]);
    if (dweight) dweight[ch] = static_cast<T>(buf[c + ch]);
    if (dbias) dbias[ch] = static_cast<T>(buf[ch]);
  }
  if (!dx) return;  // every rank decides alike (the same graph), so no rank waits alone
  buf[2 * c] = static_cast<double>(n * hw);
  sync.fn(sync.state, buf.data(), 2 * c + 1);
  const double m = buf[2 * c];
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t ch = 0; ch < c; ++ch)
    channel_dx(x, dy, weight, n, c, hw, ch, static_cast<double>(mean[ch]), static_cast<double>(invstd[ch]),
               /*training=*/true, m, buf[ch], buf[c + ch], dx);
}

template <typename T>
void batch_norm_invstd_cpu(const T* var, double eps, T* invstd, int64_t c) {
  for (int64_t ch = 0; ch < c; ++ch) invstd[ch] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var[ch]) + eps));
}

template <typename T>
void batch_norm_update_running_cpu(const T* mean, const T* var_biased, int64_t count, double momentum,
                                   T* running_mean, T* running_var, int64_t c) {
  const double unbias = count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1) : 1.0;
  for (int64_t ch = 0; ch < c; ++ch) {
    running_mean[ch] = static_cast<T>((1.0 - momentum) * static_cast<double>(running_mean[ch]) +
                                      momentum * static_cast<double>(mean[ch]));
    running_var[ch] = static_cast<T>((1.0 - momentum) * static_cast<double>(running_var[ch]) +
                                     momentum * static_cast<double>(var_biased[ch]) * unbias);
  }
}

template <typename T>
void forward_typed(const BatchNormShape& s, const T* x, const T* w, const T* b, T* running_mean, T* running_var,
                   bool training, double momentum, double eps, T* y, T* mean, T* invstd, const BatchNormSync* sync) {
  if (training) {
    std::vector<T> var(static_cast<size_t>(s.c));
    int64_t count = s.n * s.hw;
    if (sync && sync->fn)
      count = batch_norm_stats_sync_cpu(x, s.n, s.c, s.hw, mean, var.data(), *sync);
    else
      batch_norm_stats_cpu(x, s.n, s.c, s.hw, mean, var.data());
    batch_norm_invstd_cpu(var.data(), eps, invstd, s.c);
    if (running_mean && running_var)
      batch_norm_update_running_cpu(mean, var.data(), count, momentum, running_mean, running_var, s.c);
  } else {
    std::memcpy(mean, running_mean, static_cast<size_t>(s.c) * sizeof(T));
    batch_norm_invstd_cpu(running_var, eps, invstd, s.c);
  }
  batch_norm_forward_cpu(x, mean, invstd, w, b, y, s.n, s.c, s.hw);
}

void batch_norm_forward(engine::DeviceContext&, engine::DType dt, const BatchNormShape& s, const void* x,
                        const void* w, const void* b, void* rm, void* rv, bool training, double momentum, double eps,
                        void* y, void* mean, void* invstd, const BatchNormSync* sync) {
  if (dt == engine::DType::F32)
    forward_typed(s, static_cast<const float*>(x), static_cast<const float*>(w), static_cast<const float*>(b),
                  static_cast<float*>(rm), static_cast<float*>(rv), training, momentum, eps, static_cast<float*>(y),
                  static_cast<float*>(mean), static_cast<float*>(invstd), sync);
  else
    forward_typed(s, static_cast<const double*>(x), static_cast<const double*>(w), static_cast<const double*>(b),
                  static_cast<double*>(rm), static_cast<double*>(rv), training, momentum, eps,
                  static_cast<double*>(y), static_cast<double*>(mean), static_cast<double*>(invstd), sync);
}

void batch_norm_backward(engine::DeviceContext&, engine::DType dt, const BatchNormShape& s, const void* x,
                         const void* dy, const void* mean, const void* invstd, const void* w, bool training, void* dx,
                         void* dw, void* db, const BatchNormSync* sync) {
  if (training && sync && sync->fn) {
    float_or_double(dt, [&](auto t) {
      using T = decltype(t);
      batch_norm_backward_sync_cpu(static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(mean),
                                   static_cast<const T*>(invstd), static_cast<const T*>(w), static_cast<T*>(dx),
                                   static_cast<T*>(dw), static_cast<T*>(db), s.n, s.c, s.hw, *sync);
    });
    return;
  }
  if (dt == engine::DType::F32)
    batch_norm_backward_cpu(static_cast<const float*>(x), static_cast<const float*>(dy),
                            static_cast<const float*>(mean), static_cast<const float*>(invstd),
                            static_cast<const float*>(w), training, static_cast<float*>(dx), static_cast<float*>(dw),
                            static_cast<float*>(db), s.n, s.c, s.hw);
  else
    batch_norm_backward_cpu(static_cast<const double*>(x), static_cast<const double*>(dy),
                            static_cast<const double*>(mean), static_cast<const double*>(invstd),
                            static_cast<const double*>(w), training, static_cast<double*>(dx),
                            static_cast<double*>(dw), static_cast<double*>(db), s.n, s.c, s.hw);
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kBatchNormForward, &batch_norm_forward, engine::kF32F64);
  b.add(kBatchNormBackward, &batch_norm_backward, engine::kF32F64);
}

}  // namespace kernels::cpu
