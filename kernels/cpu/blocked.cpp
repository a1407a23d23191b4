// CPU entries of the blocked channel layout (kernels/common/blocked.h): the preferred channel
// block, the layout conversion, pooling and nearest upsampling on [N, C / B, H, W, B] planes, and
// the backward of average pooling and upsampling. The lanes of a block are the innermost loop, so
// each window step is one vector operation over B channels.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include <oneapi/dnnl/dnnl.hpp>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "kernels/common/blocked.h"
#include "kernels/common/spatial.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/onednn_isa.h"

namespace kernels::cpu {

namespace {

using engine::DeviceContext;
using engine::DType;

inline bool par_for(int64_t work) { return work > 32768; }

/// 16 with AVX-512 (oneDNN's avx512_core), 8 with AVX2, 0 elsewhere (no blocked layout: oneDNN's
/// blocked kernels are x86 ones). cpu_isa values are bit sets of the instruction groups. The
/// environment variable Y9_CPU_BLOCK (8, 16 or 0) overrides the choice (benchmarks of the other
/// block; 16 without AVX-512 would run oneDNN's reference kernels).
int64_t preferred_block(DeviceContext&) {
  static const int64_t block = [] {
    if (const char* e = std::getenv("Y9_CPU_BLOCK")) {
      const std::string v(e);
      if (v == "0" || v == "8" || v == "16") return static_cast<int64_t>(std::stoi(v));
    }
    return onednn_isa_has(dnnl::cpu_isa::avx512_core) ? int64_t(16)
           : onednn_isa_has(dnnl::cpu_isa::avx2)      ? int64_t(8)
                                                      : int64_t(0);
  }();
  return block;
}

/// One (sample, channel block) plane: plain rows of hw -> [hw, B] (to_blocked), or the reverse.
template <typename T, int B>
void reorder_plane(const T* x, int64_t hw, bool to_blocked, T* y) {
  constexpr int64_t kTile = 64;  // pixels per tile: B rows of kTile stay in L1
  for (int64_t i0 = 0; i0 < hw; i0 += kTile) {
    const int64_t i1 = std::min(hw, i0 + kTile);
    if (to_blocked) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t l = 0; l < B; ++l) y[i * B + l] = x[l * hw + i];
    } else {
      for (int64_t l = 0; l < B; ++l)
        for (int64_t i = i0; i < i1; ++i) y[l * hw + i] = x[i * B + l];
    }
  }
}

template <typename T, int B>
void reorder_planes(const T* x, int64_t n, int64_t c, int64_t hw, bool to_blocked, T* y) {
  const int64_t planes = n * (c / B), size = hw * B;
#pragma omp parallel for schedule(static) if (par_for(planes * size))
  for (int64_t p = 0; p < planes; ++p) reorder_plane<T, B>(x + p * size, hw, to_blocked, y + p * size);
}

void reorder(DeviceContext&, DType dt, const void* x, int64_t n, int64_t c, int64_t hw, int64_t block, bool to_blocked,
             void* y) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    if (block == 16)
      reorder_planes<T, 16>(static_cast<const T*>(x), n, c, hw, to_blocked, static_cast<T*>(y));
    else
      reorder_planes<T, 8>(static_cast<const T*>(x), n, c, hw, to_blocked, static_cast<T*>(y));
  });
}

/// One output row of a blocked pooling: `B` lanes (a compile-time block when B > 0, else g.block).
template <typename T, int B>
void pool_row(const T* xp, const BlockedPlane& g, bool max, int64_t k, int64_t stride, int64_t pad, T inv, int64_t oh,
              T* yp) {
  const int64_t lanes = B > 0 ? B : g.block;
  const int64_t h0 = pool_window_begin(oh, stride, pad), h1 = pool_window_end(oh, k, stride, pad, g.h);
  for (int64_t ow = 0; ow < g.wo; ++ow) {
    const int64_t w0 = pool_window_begin(ow, stride, pad), w1 = pool_window_end(ow, k, stride, pad, g.w);
    T acc[B > 0 ? B : 64];
    const T init = max ? -std::numeric_limits<T>::infinity() : T(0);
    for (int64_t l = 0; l < lanes; ++l) acc[l] = init;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const T* v = xp + (h * g.w + w) * lanes;
        if (max) {
          for (int64_t l = 0; l < lanes; ++l) acc[l] = max_pool_takes(v[l], acc[l]) ? v[l] : acc[l];
        } else {
          for (int64_t l = 0; l < lanes; ++l) acc[l] += v[l];
        }
      }
    T* out = yp + (oh * g.wo + ow) * lanes;
    if (max)
      for (int64_t l = 0; l < lanes; ++l) out[l] = acc[l];
    else
      for (int64_t l = 0; l < lanes; ++l) out[l] = acc[l] * inv;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
/// pool_row for F32 blocks of 16 (AVX-512) or 8 (AVX2) lanes, one vector per pixel: per lane the
/// same compares (max_pool_takes: greater, or NaN), the same adds in the same order and the same
/// multiply as pool_row, so the bits are the same. The compiler leaves pool_row's lane loops
/// scalar at the baseline ISA, and batch-1 inference pools small maps on one thread.
__attribute__((target("avx512f"))) void pool_row_avx512(const float* xp, const BlockedPlane* gp, bool max, int64_t k,
                                                         int64_t stride, int64_t pad, float inv, int64_t oh, float* yp) {
  const BlockedPlane g = *gp;
  const int64_t h0 = pool_window_begin(oh, stride, pad), h1 = pool_window_end(oh, k, stride, pad, g.h);
  const __m512 init = _mm512_set1_ps(max ? -std::numeric_limits<float>::infinity() : 0.f);
  for (int64_t ow = 0; ow < g.wo; ++ow) {
    const int64_t w0 = pool_window_begin(ow, stride, pad), w1 = pool_window_end(ow, k, stride, pad, g.w);
    __m512 acc = init;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const __m512 v = _mm512_loadu_ps(xp + (h * g.w + w) * 16);
        if (max) {
          const __mmask16 take = _mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
          acc = _mm512_mask_blend_ps(take, acc, v);
        } else {
          acc = _mm512_add_ps(acc, v);
        }
      }
    if (!max) acc = _mm512_mul_ps(acc, _mm512_set1_ps(inv));
    _mm512_storeu_ps(yp + (oh * g.wo + ow) * 16, acc);
  }
}
__attribute__((target("avx2"))) void pool_row_avx2(const float* xp, const BlockedPlane* gp, bool max, int64_t k,
                                                    int64_t stride, int64_t pad, float inv, int64_t oh, float* yp) {
  const BlockedPlane g = *gp;
  const int64_t h0 = pool_window_begin(oh, stride, pad), h1 = pool_window_end(oh, k, stride, pad, g.h);
  const __m256 init = _mm256_set1_ps(max ? -std::numeric_limits<float>::infinity() : 0.f);
  for (int64_t ow = 0; ow < g.wo; ++ow) {
    const int64_t w0 = pool_window_begin(ow, stride, pad), w1 = pool_window_end(ow, k, stride, pad, g.w);
    __m256 acc = init;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const __m256 v = _mm256_loadu_ps(xp + (h * g.w + w) * 8);
        if (max) {
          const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, acc, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
          acc = _mm256_blendv_ps(acc, v, take);
        } else {
          acc = _mm256_add_ps(acc, v);
        }
      }
    if (!max) acc = _mm256_mul_ps(acc, _mm256_set1_ps(inv));
    _mm256_storeu_ps(yp + (oh * g.wo + ow) * 8, acc);
  }
}
#endif

using PoolRowF32 = void (*)(const float*, const BlockedPlane*, bool, int64_t, int64_t, int64_t, float, int64_t, float*);

/// The vector pool_row for F32 blocks of B lanes on this CPU, or nullptr (the scalar pool_row).
template <typename T, int B>
PoolRowF32 vector_pool_row() {
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (std::is_same_v<T, float>) {
    static const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
    if (B == 16 && avx512) return &pool_row_avx512;
    if (B == 8 && avx2) return &pool_row_avx2;
  }
#endif
  return nullptr;
}

template <typename T, int B>
void pool_planes(const T* x, const BlockedPlane& g, bool max, int64_t k, int64_t stride, int64_t pad, T* y) {
  const int64_t planes = g.n * g.cb;
  const T inv = T(1) / static_cast<T>(k * k);
  const PoolRowF32 vec = vector_pool_row<T, B>();
#pragma omp parallel for collapse(2) schedule(static) if (par_for(planes * g.ho * g.wo * g.block * k * k))
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      const T* xp = x + p * g.h * g.w * g.block;
      T* yp = y + p * g.ho * g.wo * g.block;
      if constexpr (std::is_same_v<T, float>)
        if (vec) {
          vec(xp, &g, max, k, stride, pad, inv, oh, yp);
          continue;
        }
      pool_row<T, B>(xp, g, max, k, stride, pad, inv, oh, yp);
    }
}

void pool_fwd(DeviceContext&, DType dt, const void* x, const BlockedPlane& g, bool max, int64_t k, int64_t stride,
              int64_t pad, void* y) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    if (g.block == 16)
      pool_planes<T, 16>(xs, g, max, k, stride, pad, ys);
    else if (g.block == 8)
      pool_planes<T, 8>(xs, g, max, k, stride, pad, ys);
    else
      pool_planes<T, 0>(xs, g, max, k, stride, pad, ys);
  });
}

void upsample_fwd(DeviceContext&, DType dt, const void* x, const BlockedPlane& g, int64_t s, void* y) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    const int64_t planes = g.n * g.cb, lanes = g.block;
#pragma omp parallel for collapse(2) schedule(static) if (par_for(planes * g.ho * g.wo * lanes))
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        const T* in = xs + (p * g.h + oh / s) * g.w * lanes;
        T* out = ys + (p * g.ho + oh) * g.wo * lanes;
        for (int64_t ow = 0; ow < g.wo; ++ow) std::copy_n(in + (ow / s) * lanes, lanes, out + ow * lanes);
      }
  });
}

void avg_pool_bwd(DeviceContext&, DType dt, const void* dy, const BlockedPlane& g, int64_t k, int64_t stride,
                  int64_t pad, void* dx) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    const T* gs = static_cast<const T*>(dy);
    T* ds = static_cast<T*>(dx);
    const int64_t planes = g.n * g.cb, lanes = g.block;
    const T inv = T(1) / static_cast<T>(k * k);
#pragma omp parallel for schedule(static) if (par_for(planes * g.h * g.w * lanes))
    for (int64_t p = 0; p < planes; ++p) {
      T* dp = ds + p * g.h * g.w * lanes;
      std::fill(dp, dp + g.h * g.w * lanes, T(0));
      const T* gp = gs + p * g.ho * g.wo * lanes;
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        const int64_t h0 = pool_window_begin(oh, stride, pad), h1 = pool_window_end(oh, k, stride, pad, g.h);
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          const int64_t w0 = pool_window_begin(ow, stride, pad), w1 = pool_window_end(ow, k, stride, pad, g.w);
          const T* v = gp + (oh * g.wo + ow) * lanes;
          T vs[64];
          for (int64_t l = 0; l < lanes; ++l) vs[l] = v[l] * inv;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) {
              T* q = dp + (h * g.w + w) * lanes;
              for (int64_t l = 0; l < lanes; ++l) q[l] += vs[l];
            }
        }
      }
    }
  });
}

void upsample_bwd(DeviceContext&, DType dt, const void* dy, const BlockedPlane& g, int64_t s, void* dx) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    const T* gs = static_cast<const T*>(dy);
    T* ds = static_cast<T*>(dx);
    const int64_t rows = g.n * g.cb * g.h, lanes = g.block;
#pragma omp parallel for schedule(static) if (par_for(rows * g.wo * s * lanes))
    for (int64_t r = 0; r < rows; ++r) {
      T* dst = ds + r * g.w * lanes;
      const int64_t i = r % g.h, p = r / g.h;
      std::fill(dst, dst + g.w * lanes, T(0));
      for (int64_t a = 0; a < s; ++a) {
        const T* src = gs + (p * g.ho + i * s + a) * g.wo * lanes;
        for (int64_t w = 0; w < g.w; ++w) {
          T acc[64];
          for (int64_t l = 0; l < lanes; ++l) acc[l] = T(0);
          for (int64_t b = 0; b < s; ++b)
            for (int64_t l = 0; l < lanes; ++l) acc[l] += src[(w * s + b) * lanes + l];
          for (int64_t l = 0; l < lanes; ++l) dst[w * lanes + l] += acc[l];
        }
      }
    }
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kPreferredChannelBlock, &preferred_block, engine::kF32F64);
  b.add(kBlockedPool2d, &pool_fwd, engine::kF32F64);
  b.add(kBlockedUpsampleNearest, &upsample_fwd, engine::kF32F64);
  b.add(kBlockedReorder, &reorder, engine::kF32F64);
  b.add(kBlockedAvgPool2dBackward, &avg_pool_bwd, engine::kF32F64);
  b.add(kBlockedUpsampleNearestBackward, &upsample_bwd, engine::kF32F64);
}

}  // namespace kernels::cpu
