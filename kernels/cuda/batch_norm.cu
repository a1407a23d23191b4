// CUDA BatchNorm2d entries (kernels/common/batch_norm.h; CPU twin kernels/cpu/batch_norm.cpp),
// issue 11 "BatchNorm: our own kernel, with FP32 statistics". Contiguous NCHW x viewed as
// [n, c, hw]; channel ch holds M = n*hw elements. Every dtype (F32/F64/F16/BF16) accumulates in
// Acc = Scalar<T>::C (float, double for F64).
//
// Reductions are per channel and deterministic (no atomics): the M elements of a channel are split
// into S fixed spans (S from M alone), one block per (span, channel) forms a strided per-thread
// partial, a warp-shuffle tree and a shared-memory tree; a per-channel kernel then sums the S
// partials in span order into double. The per-channel sums go through a small double buffer in
// device memory, which is also what BatchNormSync all-reduces between passes (so the synchronised
// and the local paths are the same kernels).
//
// Forward (training): pass 1 sums -> mean; pass 2 sums of squared deviations from that mean (the
// two-pass variance, as the CPU twin) -> biased variance; invstd = 1/sqrt(var + eps); running
// stats updated with the unbiased variance (count/(count-1), factor 1 when count == 1), as the CPU
// twin, the per-channel arithmetic in double. Eval: mean = running_mean, invstd from
// running_var. y = x*scale + shift with scale = invstd*w, shift = b - mean*scale in Acc.
// Backward: per-channel sum dy and sum dy*xhat (one pass, two partials), dweight/dbias from them,
// then dx = a*dy + bx*(x - mean) + k per element (the CPU twin's coefficients).
// Mixed precision (BatchNormShape::f32_params, autocast): F16/BF16 x, y, dy, dx with FP32 weight,
// bias, running stats, mean, invstd, dweight and dbias (cuDNN's BatchNorm under torch autocast):
// the same kernels, the per-channel ones instantiated on float, no FP32 copy of x.
// BatchNorm2d + SiLU fused (kBatchNormSiluForward/Backward, F32/F64, or F16/BF16 x with FP32
// parameters): the same kernels with SiLU
// applied to the rounded z in the normalisation, and in the backward dz = SiLU'(z) * dy recomputed
// from x where dy was read (in the partials and in dx): the bits of the two-entry path.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/batch_norm.h"
#include "kernels/common/elementwise.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/scratch.h"

namespace kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kBnBlock = 256;          // threads per reduction block (a multiple of kWarp)
constexpr int64_t kBnSpan = 4096;      // elements of one channel per reduction block (at least)
constexpr int64_t kBnMaxSpans = 256;   // spans per channel at most

/// Spans per channel for M elements: one per kBnSpan elements, at most kBnMaxSpans, at least 1.
int64_t spans_for(int64_t m) {
  const int64_t s = ceil_div(m, kBnSpan);
  return s < 1 ? 1 : (s > kBnMaxSpans ? kBnMaxSpans : s);
}

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

/// Sum of `v` over the block (blockDim.x == kBnBlock), valid in thread 0; `sh` holds
/// kBnBlock / kWarp values of shared memory. Every thread must call it.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* sh) {
  v = warp_sum(v);
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
  if (lane == 0) sh[w] = v;
  __syncthreads();
  A r = A(0);
  if (w == 0) {
    r = lane < int(blockDim.x / kWarp) ? sh[lane] : A(0);
    r = warp_sum(r);
  }
  __syncthreads();  // sh is reused by the next call
  return r;
}

/// a / b for a >= 0, b > 0: a 32-bit division when both fit (every real shape), else 64-bit.
__device__ __forceinline__ int64_t div_nonneg(int64_t a, int64_t b) {
  if (a <= 0xffffffffLL && b <= 0xffffffffLL) return static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
  return a / b;
}

/// Channel of NCHW element i.
__device__ __forceinline__ int64_t channel_of(int64_t i, int64_t c, int64_t hw) {
  const int64_t row = div_nonneg(i, hw);
  return row - div_nonneg(row, c) * c;
}

/// Span [lo, hi) of `spans` equal spans of m elements.
__device__ __forceinline__ void span_of(int64_t m, int64_t spans, int64_t s, int64_t* lo, int64_t* hi) {
  *lo = m * s / spans;
  *hi = m * (s + 1) / spans;
}

/// Walks the elements j, j + step, j + 2 step, ... of channel ch (j < n*hw) through their NCHW
/// indices without a division per element (the reduction kernels were bound by their index
/// arithmetic: two 64-bit divisions per 2-byte element): b = j / hw and r = j % hw are advanced by
/// step = sb*hw + sr, wrapping r once.
struct ChanWalk {
  int64_t idx, r, jump, sr, wrap, hw;
  __device__ ChanWalk(int64_t j, int64_t step, int64_t c, int64_t hw_, int64_t ch) : hw(hw_) {
    const int64_t b = div_nonneg(j, hw);
    r = j - b * hw;
    idx = (b * c + ch) * hw + r;
    const int64_t sb = div_nonneg(step, hw);
    sr = step - sb * hw;
    jump = sb * c * hw + sr;
    wrap = c * hw - hw;
  }
  __device__ __forceinline__ void next() {
    idx += jump;
    r += sr;
    if (r >= hw) {
      r -= hw;
      idx += wrap;
    }
  }
};

/// The normalised value z = x*scale + shift rounded to T: the one expression of the forward
/// (bn_apply_kernel) and of the fused backward's recomputation (silu_dz), so that a GPU compiler's
/// FMA contraction treats both alike.
template <typename T, typename A>
__device__ __forceinline__ T bn_z(T x, A scale, A shift) {
  using S = Scalar<T>;
  return S::store(A(S::load(x)) * scale + shift);
}

/// The per-channel scale = invstd*w and shift = b - mean*scale (Acc): the one expression of the
/// training and eval finalisations and of the fused backward's bn_scale_shift_kernel.
template <typename A>
__device__ __forceinline__ void bn_scale_shift(A mu, A is, A w, A b, A* scale, A* shift) {
  *scale = is * w;
  *shift = b - mu * *scale;
}

/// The fused BN + SiLU's dz at element k (kBatchNormSiluBackward): z = x*scale + shift rounded to T
/// as the forward stores it, then SiLU's backward in Acc rounded to T, as the two-entry path
/// (batch_norm_forward, then the elementwise SiLU backward) computes and stores it.
template <typename T, typename A>
__device__ __forceinline__ T silu_dz(const T* __restrict__ x, const T* __restrict__ dy, int64_t k, A scale, A shift) {
  using S = Scalar<T>;
  const T z = bn_z(x[k], scale, shift);
  return S::store(unary_bwd<A>(UnaryOp::Silu, A(S::load(z)), A(0), A(S::load(dy[k])), A(0), A(0)));
}

/// Grid (spans, c): partial[ch*spans + s] = sum over span s of channel ch of x (center == null) or
/// of (x - center[ch])^2.
template <typename T, typename A>
__global__ void bn_partial_kernel(const T* __restrict__ x, int64_t n, int64_t c, int64_t hw, int64_t spans,
                                  const A* __restrict__ center, A* __restrict__ partial) {
  using S = Scalar<T>;
  __shared__ A sh[kBnBlock / kWarp];
  const int64_t ch = blockIdx.y, s = blockIdx.x;
  int64_t lo, hi;
  span_of(n * hw, spans, s, &lo, &hi);
  A acc = A(0);
  const int64_t j0 = lo + threadIdx.x;
  if (j0 < hi) {
    ChanWalk w(j0, blockDim.x, c, hw, ch);
    if (center) {
      const A mu = center[ch];
      for (int64_t j = j0; j < hi; j += blockDim.x, w.next()) {
        const A d = A(S::load(x[w.idx])) - mu;
        acc += d * d;
      }
    } else {
      for (int64_t j = j0; j < hi; j += blockDim.x, w.next()) acc += A(S::load(x[w.idx]));
    }
  }
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) partial[ch * spans + s] = acc;
}

/// Grid (spans, c): the backward partials of span s of channel ch: sum dy into p0 and
/// sum dy*(x - mean)*invstd into p1 (mean, invstd of the parameter type P: T, or float for F16/BF16
/// x with FP32 parameters).
/// Silu (kBatchNormSiluBackward): dy is the gradient of silu(z), and dz (silu_dz, from
/// scale_shift = [scale (c), shift (c)]) takes its place.
template <typename T, typename P, typename A, bool Silu>
__global__ void bn_backward_partial_kernel(const T* __restrict__ x, const T* __restrict__ dy, int64_t n, int64_t c,
                                           int64_t hw, int64_t spans, const P* __restrict__ mean,
                                           const P* __restrict__ invstd, const A* __restrict__ scale_shift,
                                           A* __restrict__ p0, A* __restrict__ p1) {
  using S = Scalar<T>;
  using SP = Scalar<P>;
  __shared__ A sh[kBnBlock / kWarp];
  const int64_t ch = blockIdx.y, s = blockIdx.x;
  const A mu = A(SP::load(mean[ch])), is = A(SP::load(invstd[ch]));
  A scale = A(0), shift = A(0);
  if constexpr (Silu) scale = scale_shift[ch], shift = scale_shift[c + ch];
  int64_t lo, hi;
  span_of(n * hw, spans, s, &lo, &hi);
  A s0 = A(0), s1 = A(0);
  const int64_t j0 = lo + threadIdx.x;
  if (j0 < hi) {  // (hw may be 0: an empty map has no element and no walk)
    ChanWalk w(j0, blockDim.x, c, hw, ch);
    for (int64_t j = j0; j < hi; j += blockDim.x, w.next()) {
      const int64_t k = w.idx;
      A d;
      if constexpr (Silu)
        d = A(S::load(silu_dz(x, dy, k, scale, shift)));
      else
        d = A(S::load(dy[k]));
      s0 += d;
      s1 += d * ((A(S::load(x[k])) - mu) * is);
    }
  }
  s0 = block_sum(s0, sh);
  s1 = block_sum(s1, sh);
  if (threadIdx.x == 0) {
    p0[ch * spans + s] = s0;
    p1[ch * spans + s] = s1;
  }
}

/// One thread per channel: sums[ch] = sum of partial[ch*spans ..] in span order (double);
/// thread 0 also writes sums[count_at] = count when count_at >= 0.
template <typename A>
__global__ void bn_channel_sums_kernel(const A* __restrict__ partial, int64_t spans, int64_t c, double* sums,
                                       int64_t count_at, double count) {
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch == 0 && count_at >= 0) sums[count_at] = count;
  if (ch >= c) return;
  double acc = 0.0;
  for (int64_t s = 0; s < spans; ++s) acc += static_cast<double>(partial[ch * spans + s]);
  sums[ch] = acc;
}

/// One thread per channel, after pass 1: mu[ch] = sums[ch] / count (sums[c] is the count; 0 when
/// the count is 0), in Acc for pass 2.
template <typename A>
__global__ void bn_mean_kernel(const double* sums, int64_t c, A* __restrict__ mu) {
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  const double m = sums[c];
  mu[ch] = A(m > 0 ? sums[ch] / m : 0.0);
}

/// One thread per channel, after pass 2 (training): sums[ch] = sum of squared deviations, sums[c]
/// = the element count (global with sync). Writes mean and invstd (T: the parameters' type), the
/// running stats (when non-null) and scale/shift (Acc) for the normalisation.
template <typename T, typename A>
__global__ void bn_train_finalize_kernel(const double* sums, const A* __restrict__ mu, int64_t c,
                                         const T* __restrict__ weight, const T* __restrict__ bias, T* running_mean,
                                         T* running_var, double momentum, double eps, T* __restrict__ mean_out,
                                         T* __restrict__ invstd_out, A* __restrict__ scale_shift) {
  using S = Scalar<T>;
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  const double count = sums[c];
  // The biased variance rounded to the statistics type (float, double for F64), as the CPU
  // twin rounds it to its dtype before invstd and the running update.
  const A var = A(count > 0 ? sums[ch] / count : 0.0);
  const double m = static_cast<double>(mu[ch]);
  const A is = A(1.0 / ::sqrt(static_cast<double>(var) + eps));
  mean_out[ch] = S::store(mu[ch]);
  invstd_out[ch] = S::store(is);
  if (running_mean && running_var) {
    const double unbias = count > 1 ? count / (count - 1) : 1.0;
    running_mean[ch] = S::store(A((1.0 - momentum) * static_cast<double>(S::load(running_mean[ch])) + momentum * m));
    running_var[ch] = S::store(A((1.0 - momentum) * static_cast<double>(S::load(running_var[ch])) +
                                 momentum * static_cast<double>(var) * unbias));
  }
  bn_scale_shift(mu[ch], is, weight ? A(S::load(weight[ch])) : A(1), bias ? A(S::load(bias[ch])) : A(0),
                 &scale_shift[ch], &scale_shift[c + ch]);
}

/// One thread per channel (eval): mean = running_mean, invstd = 1/sqrt(running_var + eps), and
/// scale/shift (Acc).
template <typename T, typename A>
__global__ void bn_eval_finalize_kernel(const T* __restrict__ running_mean, const T* __restrict__ running_var, int64_t c,
                                        const T* __restrict__ weight, const T* __restrict__ bias, double eps,
                                        T* __restrict__ mean_out, T* __restrict__ invstd_out,
                                        A* __restrict__ scale_shift) {
  using S = Scalar<T>;
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  const A mu = A(S::load(running_mean[ch]));
  const A is = A(1.0 / ::sqrt(static_cast<double>(S::load(running_var[ch])) + eps));
  mean_out[ch] = running_mean[ch];
  invstd_out[ch] = S::store(is);
  bn_scale_shift(mu, is, weight ? A(S::load(weight[ch])) : A(1), bias ? A(S::load(bias[ch])) : A(0),
                 &scale_shift[ch], &scale_shift[c + ch]);
}

/// y = x * scale[ch] + shift[ch] over the n*c*hw elements (grid-stride); Silu: y = silu(that
/// rounded to T), the elementwise SiLU's arithmetic (kBatchNormSiluForward).
template <typename T, typename A, bool Silu>
__global__ void bn_apply_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t total, int64_t c, int64_t hw,
                                const A* __restrict__ scale_shift) {
  using S = Scalar<T>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t ch = channel_of(i, c, hw);
    const T z = bn_z(x[i], scale_shift[ch], scale_shift[c + ch]);
    if constexpr (Silu)
      y[i] = S::store(unary_fwd<A>(UnaryOp::Silu, A(S::load(z)), A(0), A(0)));
    else
      y[i] = z;
  }
}

/// bn_apply_kernel over grid (x: chunks of a plane, y: planes) for maps of kPlaneMinHw elements or
/// more: the channel once per plane, no division per element; the same per-element arithmetic.
template <typename T, typename A, bool Silu>
__global__ void bn_apply_planes_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t c,
                                       int64_t hw, const A* __restrict__ scale_shift) {
  using S = Scalar<T>;
  for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
    const int64_t ch = p - div_nonneg(p, c) * c;
    const A scale = scale_shift[ch], shift = scale_shift[c + ch];
    const T* __restrict__ xp = x + p * hw;
    T* __restrict__ yp = y + p * hw;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < hw; k += int64_t(gridDim.x) * blockDim.x) {
      const T z = bn_z(xp[k], scale, shift);
      if constexpr (Silu)
        yp[k] = S::store(unary_fwd<A>(UnaryOp::Silu, A(S::load(z)), A(0), A(0)));
      else
        yp[k] = z;
    }
  }
}

/// One thread per channel (the fused backward): scale_shift = [scale (c), shift (c)] from the saved
/// mean and invstd, as bn_train_finalize_kernel / bn_eval_finalize_kernel formed them.
template <typename T, typename A>
__global__ void bn_scale_shift_kernel(const T* __restrict__ mean, const T* __restrict__ invstd, int64_t c,
                                      const T* __restrict__ weight, const T* __restrict__ bias,
                                      A* __restrict__ scale_shift) {
  using S = Scalar<T>;
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  const A mu = A(S::load(mean[ch])), is = A(S::load(invstd[ch]));
  bn_scale_shift(mu, is, weight ? A(S::load(weight[ch])) : A(1), bias ? A(S::load(bias[ch])) : A(0),
                 &scale_shift[ch], &scale_shift[c + ch]);
}

/// One thread per channel (backward): dweight = sum dy*xhat, dbias = sum dy (local sums, each
/// when non-null) from sums = [sum dy (c), sum dy*xhat (c), ...].
template <typename T>
__global__ void bn_dweight_dbias_kernel(const double* sums, int64_t c, T* __restrict__ dweight, T* __restrict__ dbias) {
  using S = Scalar<T>;
  using A = typename S::C;
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  if (dweight) dweight[ch] = S::store(A(sums[c + ch]));
  if (dbias) dbias[ch] = S::store(A(sums[ch]));
}

/// One thread per channel: the dx coefficients of the CPU twin, in double, stored in Acc:
/// a = w*invstd; training: bx = -a*invstd*sdyx/M, k = -a*sdy/M (M = sums[2c], over every rank
/// with sync); eval: bx = k = 0. coef = [a (c), bx (c), k (c), mean (c)].
template <typename T, typename A>
__global__ void bn_dx_coef_kernel(const double* sums, int64_t c, const T* __restrict__ mean,
                                  const T* __restrict__ invstd, const T* __restrict__ weight, bool training,
                                  A* __restrict__ coef) {
  using S = Scalar<T>;
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  const double is = static_cast<double>(S::load(invstd[ch]));
  const double wv = weight ? static_cast<double>(S::load(weight[ch])) : 1.0;
  const double a = wv * is;
  double bx = 0.0, k = 0.0;
  if (training && sums) {
    const double m = sums[2 * c];
    if (m > 0) {
      bx = -a * is * sums[c + ch] / m;
      k = -a * sums[ch] / m;
    }
  }
  coef[ch] = A(a);
  coef[c + ch] = A(bx);
  coef[2 * c + ch] = A(k);
  coef[3 * c + ch] = A(S::load(mean[ch]));
}

/// dx = a*dy + bx*(x - mean) + k per element (grid-stride); x - mean is formed first so that a
/// large mean does not cancel.
/// Silu: dy is the gradient of silu(z) and dz (silu_dz, from scale_shift) takes its place.
template <typename T, typename A, bool Silu>
__global__ void bn_dx_kernel(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, int64_t total,
                             int64_t c, int64_t hw, const A* __restrict__ coef, const A* __restrict__ scale_shift) {
  using S = Scalar<T>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t ch = channel_of(i, c, hw);
    A d;
    if constexpr (Silu)
      d = A(S::load(silu_dz(x, dy, i, scale_shift[ch], scale_shift[c + ch])));
    else
      d = A(S::load(dy[i]));
    const A xm = A(S::load(x[i])) - coef[3 * c + ch];
    // Spelled out (one FMA, on the dy term): left to the compiler, `a*d + bx*xm` was contracted on
    // the xm product in the Silu instantiation and on the d product in the plain one, and the
    // fused BN + SiLU's dx came out an ulp off the two-entry path's (H200).
    dx[i] = S::store(k_fma(coef[ch], d, k_mul_rn(coef[c + ch], xm)) + coef[2 * c + ch]);
  }
}

/// bn_dx_kernel over grid (x: chunks of a plane, y: planes), as bn_apply_planes_kernel.
template <typename T, typename A, bool Silu>
__global__ void bn_dx_planes_kernel(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                    int64_t planes, int64_t c, int64_t hw, const A* __restrict__ coef,
                                    const A* __restrict__ scale_shift) {
  using S = Scalar<T>;
  for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
    const int64_t ch = p - div_nonneg(p, c) * c;
    const A a = coef[ch], bx = coef[c + ch], k0 = coef[2 * c + ch], mu = coef[3 * c + ch];
    A scale = A(0), shift = A(0);
    if constexpr (Silu) scale = scale_shift[ch], shift = scale_shift[c + ch];
    const int64_t base = p * hw;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < hw; k += int64_t(gridDim.x) * blockDim.x) {
      const int64_t i = base + k;
      A d;
      if constexpr (Silu)
        d = A(S::load(silu_dz(x, dy, i, scale, shift)));
      else
        d = A(S::load(dy[i]));
      const A xm = A(S::load(x[i])) - mu;
      dx[i] = S::store(k_fma(a, d, k_mul_rn(bx, xm)) + k0);
    }
  }
}

/// Maps of at least this many elements take the plane kernels (smaller ones leave threads idle).
constexpr int64_t kPlaneMinHw = 256;

/// The plane kernels' grid: enough blocks for a plane in x (at most 64), the planes in y.
dim3 planes_grid(int64_t planes, int64_t hw) {
  const int64_t gx = std::min<int64_t>(ceil_div(hw, kBlock), 64);
  const int64_t gy = std::min<int64_t>(planes, 65535);
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
}


unsigned per_channel_grid(int64_t c) { return static_cast<unsigned>(ceil_div(c, kBlock)); }

/// T: the dtype of x and y; P: of weight, bias, the running stats, mean and invstd (T, or float
/// for F16/BF16 x with FP32 parameters: BatchNormShape::f32_params).
template <typename T, typename P = T>
void forward_typed(engine::DeviceContext& ctx, const BatchNormShape& sh, const T* x, const P* w, const P* b, P* rm,
                   P* rv, bool training, double momentum, double eps, T* y, P* mean, P* invstd,
                   const BatchNormSync* sync, bool silu = false) {
  Y9_CHECK_SHAPE(sh.block == 0, "batch_norm: the blocked channel layout (block ", sh.block, ") is CPU only");
  using A = typename Scalar<T>::C;
  cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream());
  const int64_t c = sh.c, m = sh.n * sh.hw, total = sh.n * sh.c * sh.hw;
  if (c == 0) return;
  const int64_t spans = spans_for(m);
  // scale/shift (2c) and mu (c) in Acc; partials (spans*c) in Acc; sums (c+1) in double.
  Scratch acc(ctx.device(), static_cast<size_t>(3 * c + spans * c) * sizeof(A));
  Scratch dsums(ctx.device(), static_cast<size_t>(c + 1) * sizeof(double));
  A* scale_shift = acc.as<A>();
  A* mu = scale_shift + 2 * c;
  A* partial = mu + c;
  double* sums = dsums.as<double>();
  if (training) {
    const bool synced = sync && sync->fn;
    Y9_CHECK_SHAPE(c <= 65535, "batch_norm: ", c, " channels exceed the CUDA grid (65535)");
    const dim3 grid(static_cast<unsigned>(spans), static_cast<unsigned>(c));
    // Pass 1: per-channel sums and the count -> mean.
    Y9_LAUNCH(bn_partial_kernel<T, A>, grid, kBnBlock, 0, stream, x, sh.n, c, sh.hw, spans,
              static_cast<const A*>(nullptr), partial);
    Y9_LAUNCH(bn_channel_sums_kernel<A>, per_channel_grid(c), kBlock, 0, stream, static_cast<const A*>(partial), spans,
              c, sums, c, static_cast<double>(m));
    if (synced) sync->fn(sync->state, sums, c + 1);
    Y9_LAUNCH(bn_mean_kernel<A>, per_channel_grid(c), kBlock, 0, stream, static_cast<const double*>(sums), c, mu);
    // Pass 2: squared deviations from the mean (two-pass variance). The count stays in sums[c].
    Y9_LAUNCH(bn_partial_kernel<T, A>, grid, kBnBlock, 0, stream, x, sh.n, c, sh.hw, spans,
              static_cast<const A*>(mu), partial);
    Y9_LAUNCH(bn_channel_sums_kernel<A>, per_channel_grid(c), kBlock, 0, stream, static_cast<const A*>(partial), spans,
              c, sums, int64_t(-1), 0.0);
    if (synced) sync->fn(sync->state, sums, c);
    Y9_LAUNCH(bn_train_finalize_kernel<P, A>, per_channel_grid(c), kBlock, 0, stream,
              static_cast<const double*>(sums), static_cast<const A*>(mu), c, w, b, rm, rv, momentum, eps, mean,
              invstd, scale_shift);
  } else {
    Y9_CHECK_SHAPE(rm && rv, "batch_norm: eval mode needs running_mean and running_var");
    Y9_LAUNCH(bn_eval_finalize_kernel<P, A>, per_channel_grid(c), kBlock, 0, stream, static_cast<const P*>(rm),
              static_cast<const P*>(rv), c, w, b, eps, mean, invstd, scale_shift);
  }
  const int64_t planes = sh.n * c;
  if (total > 0 && sh.hw >= kPlaneMinHw && silu)
    Y9_LAUNCH((bn_apply_planes_kernel<T, A, true>), planes_grid(planes, sh.hw), kBlock, 0, stream, x, y, planes, c,
              sh.hw, static_cast<const A*>(scale_shift));
  else if (total > 0 && sh.hw >= kPlaneMinHw)
    Y9_LAUNCH((bn_apply_planes_kernel<T, A, false>), planes_grid(planes, sh.hw), kBlock, 0, stream, x, y, planes, c,
              sh.hw, static_cast<const A*>(scale_shift));
  else if (total > 0 && silu)
    Y9_LAUNCH((bn_apply_kernel<T, A, true>), grid_for(total), kBlock, 0, stream, x, y, total, c, sh.hw,
              static_cast<const A*>(scale_shift));
  else if (total > 0)
    Y9_LAUNCH((bn_apply_kernel<T, A, false>), grid_for(total), kBlock, 0, stream, x, y, total, c, sh.hw,
              static_cast<const A*>(scale_shift));
}

/// `bias` and `silu` (kBatchNormSiluBackward): dy is the gradient of silu(z), z recomputed from x
/// with the forward's scale and shift (which need the bias).
/// T: the dtype of x, dy and dx; P: of mean, invstd, weight, bias, dweight and dbias (as forward_typed).
template <typename T, typename P = T>
void backward_typed(engine::DeviceContext& ctx, const BatchNormShape& sh, const T* x, const T* dy, const P* mean,
                    const P* invstd, const P* w, bool training, T* dx, P* dw, P* db, const BatchNormSync* sync,
                    const P* bias = nullptr, bool silu = false) {
  Y9_CHECK_SHAPE(sh.block == 0, "batch_norm: the blocked channel layout (block ", sh.block, ") is CPU only");
  using A = typename Scalar<T>::C;
  cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream());
  const int64_t c = sh.c, m = sh.n * sh.hw, total = sh.n * sh.c * sh.hw;
  if (c == 0) return;
  const bool need_sums = dw || db || (dx && training);
  const int64_t spans = spans_for(m);
  // coef (4c), scale/shift (2c), partials (2 spans c) in Acc; sums (2c+1) in double.
  Scratch acc(ctx.device(), static_cast<size_t>(6 * c + (need_sums ? 2 * spans * c : 0)) * sizeof(A));
  Scratch dsums(ctx.device(), need_sums ? static_cast<size_t>(2 * c + 1) * sizeof(double) : 0);
  A* coef = acc.as<A>();
  A* scale_shift = coef + 4 * c;
  double* sums = dsums.as<double>();
  if (silu)
    Y9_LAUNCH((bn_scale_shift_kernel<P, A>), per_channel_grid(c), kBlock, 0, stream, mean, invstd, c, w, bias,
              scale_shift);
  if (need_sums) {
    Y9_CHECK_SHAPE(c <= 65535, "batch_norm: ", c, " channels exceed the CUDA grid (65535)");
    A* p0 = scale_shift + 2 * c;
    A* p1 = p0 + spans * c;
    const dim3 grid(static_cast<unsigned>(spans), static_cast<unsigned>(c));
    if (silu)
      Y9_LAUNCH((bn_backward_partial_kernel<T, P, A, true>), grid, kBnBlock, 0, stream, x, dy, sh.n, c, sh.hw, spans,
                mean, invstd, static_cast<const A*>(scale_shift), p0, p1);
    else
      Y9_LAUNCH((bn_backward_partial_kernel<T, P, A, false>), grid, kBnBlock, 0, stream, x, dy, sh.n, c, sh.hw, spans,
                mean, invstd, static_cast<const A*>(scale_shift), p0, p1);
    Y9_LAUNCH(bn_channel_sums_kernel<A>, per_channel_grid(c), kBlock, 0, stream, static_cast<const A*>(p0), spans, c,
              sums, 2 * c, static_cast<double>(m));
    Y9_LAUNCH(bn_channel_sums_kernel<A>, per_channel_grid(c), kBlock, 0, stream, static_cast<const A*>(p1), spans, c,
              sums + c, int64_t(-1), 0.0);
    if (dw || db)
      Y9_LAUNCH(bn_dweight_dbias_kernel<P>, per_channel_grid(c), kBlock, 0, stream, static_cast<const double*>(sums), c,
                dw, db);
  }
  if (!dx) return;  // every rank decides alike (the same graph), so no rank waits alone
  if (training && sync && sync->fn) sync->fn(sync->state, sums, 2 * c + 1);
  Y9_LAUNCH(bn_dx_coef_kernel<P, A>, per_channel_grid(c), kBlock, 0, stream,
            static_cast<const double*>(training ? sums : nullptr), c, mean, invstd, w, training, coef);
  const int64_t planes = sh.n * c;
  if (total > 0 && sh.hw >= kPlaneMinHw && silu)
    Y9_LAUNCH((bn_dx_planes_kernel<T, A, true>), planes_grid(planes, sh.hw), kBlock, 0, stream, x, dy, dx, planes, c,
              sh.hw, static_cast<const A*>(coef), static_cast<const A*>(scale_shift));
  else if (total > 0 && sh.hw >= kPlaneMinHw)
    Y9_LAUNCH((bn_dx_planes_kernel<T, A, false>), planes_grid(planes, sh.hw), kBlock, 0, stream, x, dy, dx, planes,
              c, sh.hw, static_cast<const A*>(coef), static_cast<const A*>(scale_shift));
  else if (total > 0 && silu)
    Y9_LAUNCH((bn_dx_kernel<T, A, true>), grid_for(total), kBlock, 0, stream, x, dy, dx, total, c, sh.hw,
              static_cast<const A*>(coef), static_cast<const A*>(scale_shift));
  else if (total > 0)
    Y9_LAUNCH((bn_dx_kernel<T, A, false>), grid_for(total), kBlock, 0, stream, x, dy, dx, total, c, sh.hw,
              static_cast<const A*>(coef), static_cast<const A*>(scale_shift));
}

/// Calls f.template operator()<T, P>() for the entry's dtypes: P = T (F32/F64/F16/BF16), or with
/// s.f32_params P = float for T = F16/BF16. Returns false for any other combination.
template <typename F>
bool dispatch_bn(engine::DType dt, const BatchNormShape& s, F&& f) {
  if (!s.f32_params) return dispatch_float(dt, [&]<typename T>() { f.template operator()<T, T>(); });
  switch (dt) {
    case engine::DType::F16: f.template operator()<Half16, float>(); return true;
    case engine::DType::BF16: f.template operator()<Bf16, float>(); return true;
    default: return false;
  }
}

/// "f16" or "f16 x with f32 parameters", for the errors.
std::string bn_types(engine::DType dt, const BatchNormShape& s) {
  return std::string(engine::dtype_name(dt)) + (s.f32_params ? " x with f32 parameters" : "");
}

/// batch_norm_forward on CUDA (kernels/common/batch_norm.h contract): x, weight, bias, running
/// stats, y, mean, invstd are device buffers of `dtype` (F32/F64/F16/BF16; with s.f32_params the
/// per-channel ones are F32 and x, y F16/BF16), NCHW contiguous ([n, c, hw] for x and y, [c] for
/// the rest); statistics in FP32 (double for F64).
void batch_norm_forward(engine::DeviceContext& ctx, engine::DType dt, const BatchNormShape& s, const void* x,
                        const void* w, const void* b, void* rm, void* rv, bool training, double momentum, double eps,
                        void* y, void* mean, void* invstd, const BatchNormSync* sync) {
  const bool ok = dispatch_bn(dt, s, [&]<typename T, typename P>() {
    forward_typed<T, P>(ctx, s, static_cast<const T*>(x), static_cast<const P*>(w), static_cast<const P*>(b),
                        static_cast<P*>(rm), static_cast<P*>(rv), training, momentum, eps, static_cast<T*>(y),
                        static_cast<P*>(mean), static_cast<P*>(invstd), sync);
  });
  Y9_CHECK_SHAPE(ok, "batch_norm: ", bn_types(dt, s),
                 " not supported on cuda (f32, f64, f16, bf16; f16 or bf16 x with f32 parameters)");
}

/// batch_norm_backward on CUDA (kernels/common/batch_norm.h contract): x, dy, dx [n, c, hw] and
/// mean, invstd, weight, dweight, dbias [c], device buffers of `dtype` (F32/F64/F16/BF16; with
/// s.f32_params the [c] ones are F32); dx, dweight, dbias each optional; sums in FP32 (double for F64).
void batch_norm_backward(engine::DeviceContext& ctx, engine::DType dt, const BatchNormShape& s, const void* x,
                         const void* dy, const void* mean, const void* invstd, const void* w, bool training, void* dx,
                         void* dw, void* db, const BatchNormSync* sync) {
  const bool ok = dispatch_bn(dt, s, [&]<typename T, typename P>() {
    backward_typed<T, P>(ctx, s, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const P*>(mean),
                         static_cast<const P*>(invstd), static_cast<const P*>(w), training, static_cast<T*>(dx),
                         static_cast<P*>(dw), static_cast<P*>(db), sync);
  });
  Y9_CHECK_SHAPE(ok, "batch_norm: ", bn_types(dt, s),
                 " not supported on cuda (f32, f64, f16, bf16; f16 or bf16 x with f32 parameters)");
}

/// batch_norm_silu_forward on CUDA (kernels/common/batch_norm.h contract): F32/F64, or F16/BF16 x
/// with FP32 parameters (s.f32_params). Not F16/BF16 parameters: the backward recomputes z from the
/// saved mean and invstd, which F16/BF16 would round.
void batch_norm_silu_forward(engine::DeviceContext& ctx, engine::DType dt, const BatchNormShape& s, const void* x,
                             const void* w, const void* b, void* rm, void* rv, bool training, double momentum,
                             double eps, void* y, void* mean, void* invstd) {
  const bool wide = dt == engine::DType::F32 || dt == engine::DType::F64;
  Y9_CHECK_SHAPE(wide != s.f32_params, "batch_norm_silu: ", bn_types(dt, s),
                 " not supported on cuda (f32, f64; f16 or bf16 x with f32 parameters)");
  dispatch_bn(dt, s, [&]<typename T, typename P>() {
    forward_typed<T, P>(ctx, s, static_cast<const T*>(x), static_cast<const P*>(w), static_cast<const P*>(b),
                        static_cast<P*>(rm), static_cast<P*>(rv), training, momentum, eps, static_cast<T*>(y),
                        static_cast<P*>(mean), static_cast<P*>(invstd), nullptr, /*silu=*/true);
  });
}

/// batch_norm_silu_backward on CUDA (kernels/common/batch_norm.h contract; the dtypes of
/// batch_norm_silu_forward).
void batch_norm_silu_backward(engine::DeviceContext& ctx, engine::DType dt, const BatchNormShape& s, const void* x,
                              const void* dy, const void* mean, const void* invstd, const void* w, const void* b,
                              bool training, void* dx, void* dw, void* db) {
  const bool wide = dt == engine::DType::F32 || dt == engine::DType::F64;
  Y9_CHECK_SHAPE(wide != s.f32_params, "batch_norm_silu: ", bn_types(dt, s),
                 " not supported on cuda (f32, f64; f16 or bf16 x with f32 parameters)");
  dispatch_bn(dt, s, [&]<typename T, typename P>() {
    backward_typed<T, P>(ctx, s, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const P*>(mean),
                         static_cast<const P*>(invstd), static_cast<const P*>(w), training, static_cast<T*>(dx),
                         static_cast<P*>(dw), static_cast<P*>(db), nullptr, static_cast<const P*>(b), /*silu=*/true);
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kBatchNormForward, &batch_norm_forward, engine::kFloating);
  b.add(kBatchNormBackward, &batch_norm_backward, engine::kFloating);
  // F16/BF16: only with FP32 parameters (BatchNormShape::f32_params; the entries check).
  b.add(kBatchNormSiluForward, &batch_norm_silu_forward, engine::kFloating);
  b.add(kBatchNormSiluBackward, &batch_norm_silu_backward, engine::kFloating);
}

}  // namespace kernels::cuda
