// CPU BatchNorm2d entries (kernels/common/batch_norm.h) over contiguous NCHW buffers, threaded over
// channels, and over the blocked channel layout (BatchNormShape::block), threaded over (sample,
// channel block) planes; each channel's reductions run in a fixed order in double, so results are
// bitwise reproducible for any thread count. Also BatchNorm2d + SiLU fused (the Conv block's
// training form).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/common/batch_norm.h"
#include "kernels/common/elementwise.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/silu_rows.h"

namespace kernels::cpu {

namespace {

// Per-channel pieces shared by the local and the synchronised paths (one order of operations, so
// that both give bitwise the same result on one rank). Channel `ch` of NCHW `x` is n runs of hw.
//
// The sums run in double over kLanes independent accumulators: element i of each run goes to lane
// i % kLanes, and the lanes are added in a fixed tree at the end (lane_total). A single running sum
// is one dependent add per element (about 4 cycles each: 10% of a gelan-t training step went to
// these loops); the lanes vectorise and the order is still fixed, so results stay bitwise the same
// for any thread count (each channel is one thread's).
constexpr int64_t kLanes = 8;

/// The sum of the lanes in a fixed order: ((0+1)+(2+3))+((4+5)+(6+7)).
inline double lane_total(const double* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// The sums below are compiled twice: for the baseline x86-64 (SSE2: two doubles a vector) and,
// picked at run time, for AVX2 (four). Same operations in the same order, and no FMA (target
// "avx2" only, so nothing contracts), so both should give the same bits (not tested: a CPU with
// AVX2 always runs the AVX2 form).
#if defined(__x86_64__) && defined(__GNUC__)
#define Y9_BN_AVX2 __attribute__((target("avx2")))
inline bool bn_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}
#else
#define Y9_BN_AVX2
inline bool bn_avx2() { return false; }
#endif

// One run (len consecutive elements of a channel, starting at a multiple of kLanes within its row)
// added into the lanes: element i goes to lane i % kLanes.
template <typename T>
[[gnu::always_inline]] inline void sum_run_impl(const T* p, int64_t len, double* acc) {
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(p[i + j]);
  for (; i < len; ++i) acc[i % kLanes] += static_cast<double>(p[i]);
}

template <typename T>
[[gnu::always_inline]] inline void sq_dev_run_impl(const T* p, int64_t len, double mu, double* acc) {
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) {
      const double d = static_cast<double>(p[i + j]) - mu;
      acc[j] += d * d;
    }
  for (; i < len; ++i) {
    const double d = static_cast<double>(p[i]) - mu;
    acc[i % kLanes] += d * d;
  }
}

// sum dy into a0, sum dy * (x - mu) * is into a1.
template <typename T>
[[gnu::always_inline]] inline void dy_sums_run_impl(const T* px, const T* pd, int64_t len, double mu, double is,
                                                    double* a0, double* a1) {
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) {
      const double d = static_cast<double>(pd[i + j]);
      a0[j] += d;
      a1[j] += d * (static_cast<double>(px[i + j]) - mu) * is;
    }
  for (; i < len; ++i) {
    const double d = static_cast<double>(pd[i]);
    a0[i % kLanes] += d;
    a1[i % kLanes] += d * (static_cast<double>(px[i]) - mu) * is;
  }
}

// The run functions, each compiled for the baseline and for AVX2 and picked at run time.
template <typename T>
void sum_run_base(const T* p, int64_t len, double* acc) { sum_run_impl(p, len, acc); }
template <typename T>
Y9_BN_AVX2 void sum_run_avx2(const T* p, int64_t len, double* acc) { sum_run_impl(p, len, acc); }
template <typename T>
void sq_dev_run_base(const T* p, int64_t len, double mu, double* acc) { sq_dev_run_impl(p, len, mu, acc); }
template <typename T>
Y9_BN_AVX2 void sq_dev_run_avx2(const T* p, int64_t len, double mu, double* acc) { sq_dev_run_impl(p, len, mu, acc); }
template <typename T>
void dy_sums_run_base(const T* px, const T* pd, int64_t len, double mu, double is, double* a0, double* a1) {
  dy_sums_run_impl(px, pd, len, mu, is, a0, a1);
}
template <typename T>
Y9_BN_AVX2 void dy_sums_run_avx2(const T* px, const T* pd, int64_t len, double mu, double is, double* a0,
                                 double* a1) {
  dy_sums_run_impl(px, pd, len, mu, is, a0, a1);
}
template <typename T>
void sum_run(const T* p, int64_t len, double* acc) {
  bn_avx2() ? sum_run_avx2(p, len, acc) : sum_run_base(p, len, acc);
}
template <typename T>
void sq_dev_run(const T* p, int64_t len, double mu, double* acc) {
  bn_avx2() ? sq_dev_run_avx2(p, len, mu, acc) : sq_dev_run_base(p, len, mu, acc);
}
template <typename T>
void dy_sums_run(const T* px, const T* pd, int64_t len, double mu, double is, double* a0, double* a1) {
  bn_avx2() ? dy_sums_run_avx2(px, pd, len, mu, is, a0, a1) : dy_sums_run_base(px, pd, len, mu, is, a0, a1);
}

// Sum of channel ch, in double.
template <typename T>
double channel_sum(const T* x, int64_t n, int64_t c, int64_t hw, int64_t ch) {
  double acc[kLanes] = {};
  for (int64_t b = 0; b < n; ++b) sum_run(x + (b * c + ch) * hw, hw, acc);
  return lane_total(acc);
}

// Sum of squared deviations from `mu` (the second pass: avoids the cancellation of E[x^2] - E[x]^2).
template <typename T>
double channel_sq_dev(const T* x, int64_t n, int64_t c, int64_t hw, int64_t ch, double mu) {
  double acc[kLanes] = {};
  for (int64_t b = 0; b < n; ++b) sq_dev_run(x + (b * c + ch) * hw, hw, mu, acc);
  return lane_total(acc);
}

// Backward sums of channel ch: sum dy and sum dy * xhat, xhat = (x - mu) * is.
template <typename T>
void channel_dy_sums(const T* x, const T* dy, int64_t n, int64_t c, int64_t hw, int64_t ch, double mu, double is,
                     double* sdy, double* sdyx) {
  double a0[kLanes] = {}, a1[kLanes] = {};
  for (int64_t b = 0; b < n; ++b) dy_sums_run(x + (b * c + ch) * hw, dy + (b * c + ch) * hw, hw, mu, is, a0, a1);
  *sdy = lane_total(a0);
  *sdyx = lane_total(a1);
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
struct DxCoefficients {
  T a, bx, k, mu;
};

template <typename T>
DxCoefficients<T> dx_coefficients(const T* weight, int64_t ch, double mu, double is, bool training, double m,
                                  double sdy, double sdyx) {
  const double wv = weight ? static_cast<double>(weight[ch]) : 1.0;
  const double a = wv * is;
  const double bx = training && m > 0 ? -a * is * sdyx / m : 0.0;
  const double k = training && m > 0 ? -a * sdy / m : 0.0;
  return {static_cast<T>(a), static_cast<T>(bx), static_cast<T>(k), static_cast<T>(mu)};
}

/// dx over one run of len elements.
template <typename T>
inline void dx_run(const T* px, const T* pd, T* q, int64_t len, const DxCoefficients<T>& k) {
  const T ta = k.a, tb = k.bx, tk = k.k, tmu = k.mu;
#pragma omp simd
  for (int64_t i = 0; i < len; ++i) q[i] = ta * pd[i] + tb * (px[i] - tmu) + tk;
}

template <typename T>
void channel_dx(const T* x, const T* dy, const T* weight, int64_t n, int64_t c, int64_t hw, int64_t ch, double mu,
                double is, bool training, double m, double sdy, double sdyx, T* dx) {
  const DxCoefficients<T> k = dx_coefficients(weight, ch, mu, is, training, m, sdy, sdyx);
  for (int64_t b = 0; b < n; ++b) dx_run(x + (b * c + ch) * hw, dy + (b * c + ch) * hw, dx + (b * c + ch) * hw, hw, k);
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

/// z = x * scale + shift over n elements: the normalisation of batch_norm_forward_cpu and of the
/// fused BN + SiLU (forward, and the backward's recomputation).
template <typename T>
inline void bn_affine_rows(const T* x, T scale, T shift, T* z, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] * scale + shift;
}

/// The per-channel scale and shift of the forward: z = x * scale + shift.
template <typename T>
inline void bn_scale_shift(const T* mean, const T* invstd, const T* weight, const T* bias, int64_t ch, T* scale,
                           T* shift) {
  *scale = invstd[ch] * (weight ? weight[ch] : T(1));
  *shift = (bias ? bias[ch] : T(0)) - mean[ch] * *scale;
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

// --- BatchNorm2d + SiLU (kBatchNormSiluForward / kBatchNormSiluBackward) --------------------------
// Rows are processed in chunks of kChunk elements (a multiple of kLanes, so every chunk starts on
// lane 0 and the sums add the same terms in the same order as the whole-row loops above): z is
// formed in a stack buffer by the plain forward's bn_scale_shift and bn_affine_rows and SiLU applied
// with the elementwise entries' row functions, so every value has the bits of the two-entry path.
constexpr int64_t kChunk = 1024;
static_assert(kChunk % kLanes == 0);

/// y = silu(z) over n elements (F32: the elementwise entries' vector rows on contiguous data; F64:
/// their scalar form, kernels/common/elementwise.h).
inline void silu_rows(const float* z, float* y, int64_t n) { silu_rows_f32(z, y, n); }
inline void silu_rows(const double* z, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = unary_fwd<double>(UnaryOp::Silu, z[i], 0.0, 0.0);
}
/// dz = SiLU'(z) * dy over n elements (the elementwise entries' backward: unary_bwd's formula).
inline void silu_backward_rows(const float* z, const float* dy, float* dz, int64_t n) {
  silu_backward_rows_f32(z, dy, dz, n);
}
inline void silu_backward_rows(const double* z, const double* dy, double* dz, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dz[i] = unary_bwd<double>(UnaryOp::Silu, z[i], 0.0, dy[i], 0.0, 0.0);
}

/// y = z (silu: y = silu(z), the fused BN + SiLU, z formed chunk by chunk in a stack buffer).
template <typename T>
void batch_norm_forward_cpu(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                            int64_t n, int64_t c, int64_t hw, bool silu) {
#pragma omp parallel for collapse(2) schedule(static) if (parallel_work(n, c, hw))
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      T scale, shift;
      bn_scale_shift(mean, invstd, weight, bias, ch, &scale, &shift);
      const T* p = x + (b * c + ch) * hw;
      T* q = y + (b * c + ch) * hw;
      if (!silu) {
        bn_affine_rows(p, scale, shift, q, hw);
        continue;
      }
      T z[kChunk];
      for (int64_t i = 0; i < hw; i += kChunk) {
        const int64_t len = std::min(kChunk, hw - i);
        bn_affine_rows(p + i, scale, shift, z, len);
        silu_rows(z, q + i, len);
      }
    }
}

template <typename T>
void batch_norm_silu_backward_cpu(const T* x, const T* dy, const T* mean, const T* invstd, const T* weight,
                                  const T* bias, bool training, T* dx, T* dweight, T* dbias, int64_t n, int64_t c,
                                  int64_t hw) {
  const double m = static_cast<double>(n * hw);
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mu = static_cast<double>(mean[ch]), is = static_cast<double>(invstd[ch]);
    T scale, shift, z[kChunk], dz_chunk[kChunk];
    bn_scale_shift(mean, invstd, weight, bias, ch, &scale, &shift);
    // Pass 1: dz = SiLU'(z) * dy (z recomputed), kept in dx (or a chunk buffer when dx is not
    // wanted), and the BN sums over it.
    double a0[kLanes] = {}, a1[kLanes] = {};
    for (int64_t b = 0; b < n; ++b) {
      const int64_t row = (b * c + ch) * hw;
      for (int64_t i = 0; i < hw; i += kChunk) {
        const int64_t len = std::min(kChunk, hw - i);
        T* dz = dx ? dx + row + i : dz_chunk;
        bn_affine_rows(x + row + i, scale, shift, z, len);
        silu_backward_rows(z, dy + row + i, dz, len);
        dy_sums_run(x + row + i, dz, len, mu, is, a0, a1);
      }
    }
    const double sdy = lane_total(a0), sdyx = lane_total(a1);
    if (dweight) dweight[ch] = static_cast<T>(sdyx);
    if (dbias) dbias[ch] = static_cast<T>(sdy);
    if (!dx) continue;
    // Pass 2: dx from dz, in place (elementwise).
    const DxCoefficients<T> k = dx_coefficients(weight, ch, mu, is, training, m, sdy, sdyx);
    for (int64_t b = 0; b < n; ++b) {
      const int64_t row = (b * c + ch) * hw;
      dx_run(x + row, dx + row, dx + row, hw, k);
    }
  }
}

// --- blocked channel layout (BatchNormShape::block = B > 0) ---------------------------------------
// x is [n, c / B, hw, B]: the (sample b, block cb) plane holds hw positions of the B channels
// cb * B .. cb * B + B - 1, one per lane. A pass runs in parallel over the n * c / B planes (a
// 16-channel layer is one block: the samples give the work), each plane's sums go to the B lanes of
// its slot in an [n, c] array of doubles (slot b * c + cb * B + lane), and every channel's slots are
// then added over b = 0, 1, ..., n - 1: a fixed order, so bitwise the same for any thread count.
// Within a plane, position p goes to accumulator row p % R (R rows of B doubles: independent adds
// that vectorise over the lanes), the rows added in a fixed tree at the end (rows_total). The inner
// loops run over the B contiguous lanes with per-lane coefficient arrays: no division or modulo per
// element.

/// The rows of a plane sum (R of B doubles) added into out[B]: R = 1, 2 or 4, fixed tree.
template <int B, int R>
inline void rows_total(const double* acc, double* out) {
  for (int l = 0; l < B; ++l) {
    if constexpr (R == 1)
      out[l] = acc[l];
    else if constexpr (R == 2)
      out[l] = acc[l] + acc[B + l];
    else
      out[l] = (acc[l] + acc[B + l]) + (acc[2 * B + l] + acc[3 * B + l]);
  }
}

// Rows of the one-operand sums (32 doubles of accumulators) and of the backward's two sums (16 each).
template <int B>
constexpr int kSumRows = 32 / B;
template <int B>
constexpr int kDyRows = 16 / B;

// Sum of each lane over npos positions of p (p[pos * B + lane]) into acc[kSumRows][B].
template <int B, typename T>
[[gnu::always_inline]] inline void plane_sum_impl(const T* p, int64_t npos, double* acc) {
  constexpr int R = kSumRows<B>;
  int64_t i = 0;
  for (; i + R <= npos; i += R)
    for (int r = 0; r < R; ++r)
      for (int l = 0; l < B; ++l) acc[r * B + l] += static_cast<double>(p[(i + r) * B + l]);
  for (int r = 0; i < npos; ++i, ++r)
    for (int l = 0; l < B; ++l) acc[r * B + l] += static_cast<double>(p[i * B + l]);
}

// Sum of (p - mu[lane])^2 of each lane into acc[kSumRows][B].
template <int B, typename T>
[[gnu::always_inline]] inline void plane_sq_dev_impl(const T* p, int64_t npos, const double* mu, double* acc) {
  constexpr int R = kSumRows<B>;
  int64_t i = 0;
  for (; i + R <= npos; i += R)
    for (int r = 0; r < R; ++r)
      for (int l = 0; l < B; ++l) {
        const double d = static_cast<double>(p[(i + r) * B + l]) - mu[l];
        acc[r * B + l] += d * d;
      }
  for (int r = 0; i < npos; ++i, ++r)
    for (int l = 0; l < B; ++l) {
      const double d = static_cast<double>(p[i * B + l]) - mu[l];
      acc[r * B + l] += d * d;
    }
}

// sum dy into a0, sum dy * (x - mu) * is into a1 (each [kDyRows][B]), per lane. npos is a multiple
// of kDyRows except for a plane's last run, so chunked calls add as one whole-plane call.
template <int B, typename T>
[[gnu::always_inline]] inline void plane_dy_sums_impl(const T* px, const T* pd, int64_t npos, const double* mu,
                                                      const double* is, double* a0, double* a1) {
  constexpr int R = kDyRows<B>;
  int64_t i = 0;
  for (; i + R <= npos; i += R)
    for (int r = 0; r < R; ++r)
      for (int l = 0; l < B; ++l) {
        const int64_t e = (i + r) * B + l;
        const double d = static_cast<double>(pd[e]);
        a0[r * B + l] += d;
        a1[r * B + l] += d * (static_cast<double>(px[e]) - mu[l]) * is[l];
      }
  for (int r = 0; i < npos; ++i, ++r)
    for (int l = 0; l < B; ++l) {
      const int64_t e = i * B + l;
      const double d = static_cast<double>(pd[e]);
      a0[r * B + l] += d;
      a1[r * B + l] += d * (static_cast<double>(px[e]) - mu[l]) * is[l];
    }
}

// Baseline and AVX2 forms, picked at run time (as sum_run and the others above).
template <int B, typename T>
void plane_sum_base(const T* p, int64_t npos, double* acc) { plane_sum_impl<B>(p, npos, acc); }
template <int B, typename T>
Y9_BN_AVX2 void plane_sum_avx2(const T* p, int64_t npos, double* acc) { plane_sum_impl<B>(p, npos, acc); }
template <int B, typename T>
void plane_sq_dev_base(const T* p, int64_t npos, const double* mu, double* acc) {
  plane_sq_dev_impl<B>(p, npos, mu, acc);
}
template <int B, typename T>
Y9_BN_AVX2 void plane_sq_dev_avx2(const T* p, int64_t npos, const double* mu, double* acc) {
  plane_sq_dev_impl<B>(p, npos, mu, acc);
}
template <int B, typename T>
void plane_dy_sums_base(const T* px, const T* pd, int64_t npos, const double* mu, const double* is, double* a0,
                        double* a1) {
  plane_dy_sums_impl<B>(px, pd, npos, mu, is, a0, a1);
}
template <int B, typename T>
Y9_BN_AVX2 void plane_dy_sums_avx2(const T* px, const T* pd, int64_t npos, const double* mu, const double* is,
                                   double* a0, double* a1) {
  plane_dy_sums_impl<B>(px, pd, npos, mu, is, a0, a1);
}

/// Whole-plane sum of each lane into out[B].
template <int B, typename T>
void plane_sum(const T* p, int64_t npos, double* out) {
  double acc[kSumRows<B> * B] = {};
  bn_avx2() ? plane_sum_avx2<B>(p, npos, acc) : plane_sum_base<B>(p, npos, acc);
  rows_total<B, kSumRows<B>>(acc, out);
}
/// Whole-plane sum of squared deviations from mu[lane] into out[B].
template <int B, typename T>
void plane_sq_dev(const T* p, int64_t npos, const double* mu, double* out) {
  double acc[kSumRows<B> * B] = {};
  bn_avx2() ? plane_sq_dev_avx2<B>(p, npos, mu, acc) : plane_sq_dev_base<B>(p, npos, mu, acc);
  rows_total<B, kSumRows<B>>(acc, out);
}
/// Backward sums of npos positions added into the accumulators a0, a1 ([kDyRows][B] each).
template <int B, typename T>
void plane_dy_sums(const T* px, const T* pd, int64_t npos, const double* mu, const double* is, double* a0,
                   double* a1) {
  bn_avx2() ? plane_dy_sums_avx2<B>(px, pd, npos, mu, is, a0, a1) : plane_dy_sums_base<B>(px, pd, npos, mu, is, a0, a1);
}

/// Per channel, the sum over the samples (b = 0 .. n-1, in order) of the plane slots part[b * c + ch].
inline void add_over_samples(const std::vector<double>& part, int64_t n, int64_t c, double* out) {
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0.0;
    for (int64_t b = 0; b < n; ++b) s += part[b * c + ch];
    out[ch] = s;
  }
}

// Statistics of blocked x (two-pass, as batch_norm_stats_cpu): per-plane sums, then the means, then
// per-plane squared deviations from them.
template <int B, typename T>
void batch_norm_stats_blocked_cpu(const T* x, int64_t n, int64_t c, int64_t hw, T* mean, T* var_biased) {
  const int64_t nb = c / B, planes = n * nb;
  const double m = static_cast<double>(n * hw);
  std::vector<double> part(static_cast<size_t>(n * c)), mu(static_cast<size_t>(c)), ss(static_cast<size_t>(c));
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t pl = 0; pl < planes; ++pl) plane_sum<B>(x + pl * hw * B, hw, &part[pl * B]);
  add_over_samples(part, n, c, mu.data());
  for (int64_t ch = 0; ch < c; ++ch) mu[ch] = m > 0 ? mu[ch] / m : 0.0;
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t pl = 0; pl < planes; ++pl) plane_sq_dev<B>(x + pl * hw * B, hw, &mu[(pl % nb) * B], &part[pl * B]);
  add_over_samples(part, n, c, ss.data());
  for (int64_t ch = 0; ch < c; ++ch) {
    mean[ch] = static_cast<T>(mu[ch]);
    var_biased[ch] = static_cast<T>(m > 0 ? ss[ch] / m : 0.0);
  }
}

/// z = x * scale[lane] + shift[lane] over npos positions (bn_affine_rows per lane: the same rounding).
template <int B, typename T>
inline void bn_affine_blocked(const T* x, const T* scale, const T* shift, T* z, int64_t npos) {
  for (int64_t i = 0; i < npos; ++i)
#pragma omp simd
    for (int l = 0; l < B; ++l) z[i * B + l] = x[i * B + l] * scale[l] + shift[l];
}

/// y = z (silu: y = silu(z), z formed chunk by chunk in a stack buffer), as batch_norm_forward_cpu.
template <int B, typename T>
void batch_norm_forward_blocked_cpu(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                                    int64_t n, int64_t c, int64_t hw, bool silu) {
  static_assert(kChunk % B == 0);
  const int64_t nb = c / B, planes = n * nb, len = hw * B;
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t pl = 0; pl < planes; ++pl) {
    const int64_t ch0 = (pl % nb) * B;
    T scale[B], shift[B];
    for (int l = 0; l < B; ++l) bn_scale_shift(mean, invstd, weight, bias, ch0 + l, &scale[l], &shift[l]);
    const T* p = x + pl * len;
    T* q = y + pl * len;
    if (!silu) {
      bn_affine_blocked<B>(p, scale, shift, q, hw);
      continue;
    }
    T z[kChunk];
    for (int64_t i = 0; i < len; i += kChunk) {
      const int64_t cl = std::min(kChunk, len - i);
      bn_affine_blocked<B>(p + i, scale, shift, z, cl / B);
      silu_rows(z, q + i, cl);
    }
  }
}

/// dx = a[lane] * dy + bx[lane] * (x - mu[lane]) + k[lane] over npos positions (dx_run per lane).
template <int B, typename T>
inline void dx_blocked(const T* px, const T* pd, T* q, int64_t npos, const T* a, const T* bx, const T* k,
                       const T* mu) {
  for (int64_t i = 0; i < npos; ++i)
#pragma omp simd
    for (int l = 0; l < B; ++l) q[i * B + l] = a[l] * pd[i * B + l] + bx[l] * (px[i * B + l] - mu[l]) + k[l];
}

/// Backward of batch_norm_forward_blocked_cpu (silu: of the fused BN + SiLU, dz = SiLU'(z) * dy with
/// z recomputed from x, kept in dx or a chunk buffer, then the sums and dx from dz in place, as
/// batch_norm_silu_backward_cpu). Pass 1 per plane: the sums (and dz); then per channel over the
/// samples; pass 2 per plane: dx.
template <int B, typename T>
void batch_norm_backward_blocked_cpu(const T* x, const T* dy, const T* mean, const T* invstd, const T* weight,
                                     const T* bias, bool training, T* dx, T* dweight, T* dbias, int64_t n, int64_t c,
                                     int64_t hw, bool silu) {
  constexpr int R = kDyRows<B>;
  static_assert(kChunk % (B * R) == 0);  // every chunk but a plane's last is whole rows
  const int64_t nb = c / B, planes = n * nb, len = hw * B;
  const double m = static_cast<double>(n * hw);
  std::vector<double> part0(static_cast<size_t>(n * c)), part1(static_cast<size_t>(n * c));
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t pl = 0; pl < planes; ++pl) {
    const int64_t ch0 = (pl % nb) * B;
    double mu[B], is[B], a0[R * B] = {}, a1[R * B] = {};
    for (int l = 0; l < B; ++l) {
      mu[l] = static_cast<double>(mean[ch0 + l]);
      is[l] = static_cast<double>(invstd[ch0 + l]);
    }
    const T* px = x + pl * len;
    if (!silu) {
      plane_dy_sums<B>(px, dy + pl * len, hw, mu, is, a0, a1);
    } else {
      T scale[B], shift[B], z[kChunk], dz_chunk[kChunk];
      for (int l = 0; l < B; ++l) bn_scale_shift(mean, invstd, weight, bias, ch0 + l, &scale[l], &shift[l]);
      for (int64_t i = 0; i < len; i += kChunk) {
        const int64_t cl = std::min(kChunk, len - i);
        T* dz = dx ? dx + pl * len + i : dz_chunk;
        bn_affine_blocked<B>(px + i, scale, shift, z, cl / B);
        silu_backward_rows(z, dy + pl * len + i, dz, cl);
        plane_dy_sums<B>(px + i, dz, cl / B, mu, is, a0, a1);
      }
    }
    rows_total<B, R>(a0, &part0[pl * B]);
    rows_total<B, R>(a1, &part1[pl * B]);
  }
  std::vector<double> sdy(static_cast<size_t>(c)), sdyx(static_cast<size_t>(c));
  add_over_samples(part0, n, c, sdy.data());
  add_over_samples(part1, n, c, sdyx.data());
  for (int64_t ch = 0; ch < c; ++ch) {
    if (dweight) dweight[ch] = static_cast<T>(sdyx[ch]);
    if (dbias) dbias[ch] = static_cast<T>(sdy[ch]);
  }
  if (!dx) return;
  std::vector<DxCoefficients<T>> coef(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch)
    coef[ch] = dx_coefficients(weight, ch, static_cast<double>(mean[ch]), static_cast<double>(invstd[ch]), training,
                               m, sdy[ch], sdyx[ch]);
  const T* src = silu ? dx : dy;  // the fused backward's dz is in dx
#pragma omp parallel for schedule(static) if (parallel_work(n, c, hw))
  for (int64_t pl = 0; pl < planes; ++pl) {
    const int64_t ch0 = (pl % nb) * B;
    T a[B], bx[B], k[B], mu[B];
    for (int l = 0; l < B; ++l) {
      const DxCoefficients<T>& q = coef[ch0 + l];
      a[l] = q.a, bx[l] = q.bx, k[l] = q.k, mu[l] = q.mu;
    }
    dx_blocked<B>(x + pl * len, src + pl * len, dx + pl * len, hw, a, bx, k, mu);
  }
}

/// The CPU entries take one dtype for x and the parameters (BatchNormShape::f32_params is CUDA's).
void check_one_dtype(const BatchNormShape& s, engine::DType dt) {
  Y9_CHECK_SHAPE(!s.f32_params, "batch_norm: ", engine::dtype_name(dt),
                 " x with f32 parameters is a CUDA entry (the CPU kernels take one dtype)");
}

/// f(std::integral_constant<int, B>{}) for the block of s (8 or 16).
template <typename F>
void with_block(const BatchNormShape& s, F&& f) {
  Y9_CHECK_SHAPE((s.block == 8 || s.block == 16) && s.c % s.block == 0,
                 "batch_norm: the blocked layout needs a block of 8 or 16 dividing c, got block ", s.block,
                 " for c = ", s.c);
  if (s.block == 8)
    f(std::integral_constant<int, 8>{});
  else
    f(std::integral_constant<int, 16>{});
}

template <typename T>
void forward_typed(const BatchNormShape& s, const T* x, const T* w, const T* b, T* running_mean, T* running_var,
                   bool training, double momentum, double eps, T* y, T* mean, T* invstd, const BatchNormSync* sync,
                   bool silu = false) {
  if (training) {
    std::vector<T> var(static_cast<size_t>(s.c));
    int64_t count = s.n * s.hw;
    if (s.block > 0) {
      Y9_CHECK_SHAPE(!(sync && sync->fn), "batch_norm: synchronised BatchNorm of a blocked x is not a CPU kernel "
                     "(ops::batch_norm computes it on the plain layout)");
      with_block(s, [&](auto bc) {
        batch_norm_stats_blocked_cpu<decltype(bc)::value>(x, s.n, s.c, s.hw, mean, var.data());
      });
    } else if (sync && sync->fn) {
      count = batch_norm_stats_sync_cpu(x, s.n, s.c, s.hw, mean, var.data(), *sync);
    } else {
      batch_norm_stats_cpu(x, s.n, s.c, s.hw, mean, var.data());
    }
    batch_norm_invstd_cpu(var.data(), eps, invstd, s.c);
    if (running_mean && running_var)
      batch_norm_update_running_cpu(mean, var.data(), count, momentum, running_mean, running_var, s.c);
  } else {
    std::memcpy(mean, running_mean, static_cast<size_t>(s.c) * sizeof(T));
    batch_norm_invstd_cpu(running_var, eps, invstd, s.c);
  }
  if (s.block > 0)
    with_block(s, [&](auto bc) {
      batch_norm_forward_blocked_cpu<decltype(bc)::value>(x, mean, invstd, w, b, y, s.n, s.c, s.hw, silu);
    });
  else
    batch_norm_forward_cpu(x, mean, invstd, w, b, y, s.n, s.c, s.hw, silu);
}

void batch_norm_forward(engine::DeviceContext&, engine::DType dt, const BatchNormShape& s, const void* x,
                        const void* w, const void* b, void* rm, void* rv, bool training, double momentum, double eps,
                        void* y, void* mean, void* invstd, const BatchNormSync* sync) {
  check_one_dtype(s, dt);
  if (dt == engine::DType::F32)
    forward_typed(s, static_cast<const float*>(x), static_cast<const float*>(w), static_cast<const float*>(b),
                  static_cast<float*>(rm), static_cast<float*>(rv), training, momentum, eps, static_cast<float*>(y),
                  static_cast<float*>(mean), static_cast<float*>(invstd), sync);
  else
    forward_typed(s, static_cast<const double*>(x), static_cast<const double*>(w), static_cast<const double*>(b),
                  static_cast<double*>(rm), static_cast<double*>(rv), training, momentum, eps,
                  static_cast<double*>(y), static_cast<double*>(mean), static_cast<double*>(invstd), sync);
}

/// The backward of a blocked x (s.block > 0), of BatchNorm or (silu) the fused BN + SiLU.
void backward_blocked(engine::DType dt, const BatchNormShape& s, const void* x, const void* dy, const void* mean,
                      const void* invstd, const void* w, const void* b, bool training, void* dx, void* dw, void* db,
                      bool silu) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    with_block(s, [&](auto bc) {
      batch_norm_backward_blocked_cpu<decltype(bc)::value>(
          static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(mean),
          static_cast<const T*>(invstd), static_cast<const T*>(w), static_cast<const T*>(b), training,
          static_cast<T*>(dx), static_cast<T*>(dw), static_cast<T*>(db), s.n, s.c, s.hw, silu);
    });
  });
}

void batch_norm_backward(engine::DeviceContext&, engine::DType dt, const BatchNormShape& s, const void* x,
                         const void* dy, const void* mean, const void* invstd, const void* w, bool training, void* dx,
                         void* dw, void* db, const BatchNormSync* sync) {
  check_one_dtype(s, dt);
  if (s.block > 0) {
    Y9_CHECK_SHAPE(!(training && sync && sync->fn), "batch_norm: synchronised BatchNorm of a blocked x is not a "
                   "CPU kernel (ops::batch_norm computes it on the plain layout)");
    backward_blocked(dt, s, x, dy, mean, invstd, w, nullptr, training, dx, dw, db, /*silu=*/false);
    return;
  }
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

void batch_norm_silu_forward(engine::DeviceContext&, engine::DType dt, const BatchNormShape& s, const void* x,
                             const void* w, const void* b, void* rm, void* rv, bool training, double momentum,
                             double eps, void* y, void* mean, void* invstd) {
  check_one_dtype(s, dt);
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    forward_typed(s, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
                  static_cast<T*>(rm), static_cast<T*>(rv), training, momentum, eps, static_cast<T*>(y),
                  static_cast<T*>(mean), static_cast<T*>(invstd), nullptr, /*silu=*/true);
  });
}

void batch_norm_silu_backward(engine::DeviceContext&, engine::DType dt, const BatchNormShape& s, const void* x,
                              const void* dy, const void* mean, const void* invstd, const void* w, const void* b,
                              bool training, void* dx, void* dw, void* db) {
  check_one_dtype(s, dt);
  if (s.block > 0) return backward_blocked(dt, s, x, dy, mean, invstd, w, b, training, dx, dw, db, /*silu=*/true);
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    batch_norm_silu_backward_cpu(static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(mean),
                                 static_cast<const T*>(invstd), static_cast<const T*>(w), static_cast<const T*>(b),
                                 training, static_cast<T*>(dx), static_cast<T*>(dw), static_cast<T*>(db), s.n, s.c,
                                 s.hw);
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kBatchNormForward, &batch_norm_forward, engine::kF32F64);
  b.add(kBatchNormBackward, &batch_norm_backward, engine::kF32F64);
  b.add(kBatchNormSiluForward, &batch_norm_silu_forward, engine::kF32F64);
  b.add(kBatchNormSiluBackward, &batch_norm_silu_backward, engine::kF32F64);
}

}  // namespace kernels::cpu
