// Spatial CPU twins. Parallel over (n, c) planes (or output rows for upsampling) so every
// thread writes a disjoint region: the backward scatters need no atomics and are deterministic.
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/common/spatial.h"
#include "kernels/cpu/dispatch.h"

namespace kernels::cpu {

namespace {
inline bool par_for(int64_t work) { return work > 32768; }

template <typename T>
void upsample_nearest_forward_cpu(const T* x, const Plane2d& g, int64_t s, T* y) {
  // One input row -> one widened output row, then s-1 memcpy copies of it (the vertical repeats).
  const int64_t rows = g.n * g.c * g.h;
#pragma omp parallel for schedule(static) if (par_for(rows * g.wo * s))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % g.h, nc = r / g.h, c = nc % g.c, n = nc / g.c;
    const T* src = x + n * g.xs[0] + c * g.xs[1] + i * g.xs[2];
    T* dst = y + (nc * g.ho + i * s) * g.wo;
    const int64_t sw = g.xs[3];
    if (s == 2) {
      for (int64_t w = 0; w < g.w; ++w) dst[2 * w] = dst[2 * w + 1] = src[w * sw];
    } else {
      for (int64_t w = 0; w < g.w; ++w) {
        const T v = src[w * sw];
        for (int64_t b = 0; b < s; ++b) dst[w * s + b] = v;
      }
    }
    for (int64_t a = 1; a < s; ++a) std::memcpy(dst + a * g.wo, dst, static_cast<size_t>(g.wo) * sizeof(T));
  }
}

template <typename T>
void upsample_nearest_backward_cpu(const T* dy, const Plane2d& g, int64_t s, T* dx) {
  const int64_t rows = g.n * g.c * g.h;
#pragma omp parallel for schedule(static) if (par_for(rows * g.wo * s))
  for (int64_t r = 0; r < rows; ++r) {
    T* dst = dx + r * g.w;
    const int64_t i = r % g.h, nc = r / g.h;
    for (int64_t w = 0; w < g.w; ++w) dst[w] = T(0);
    for (int64_t a = 0; a < s; ++a) {
      const T* src = dy + (nc * g.ho + i * s + a) * g.wo;
      for (int64_t w = 0; w < g.w; ++w) {
        T acc = T(0);
        for (int64_t b = 0; b < s; ++b) acc += src[w * s + b];
        dst[w] += acc;
      }
    }
  }
}

template <typename T>
void max_pool2d_forward_cpu(const T* x, const Plane2d& g, int64_t k, int64_t stride, int64_t pad, T* y,
                            int64_t* idx) {
  const int64_t planes = g.n * g.c;
#pragma omp parallel for schedule(static) if (par_for(planes * g.ho * g.wo * k * k))
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = x + (p / g.c) * g.xs[0] + (p % g.c) * g.xs[1];
    T* yp = y + p * g.ho * g.wo;
    int64_t* ip = idx + p * g.ho * g.wo;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      const int64_t h0 = pool_window_begin(oh, stride, pad), h1 = pool_window_end(oh, k, stride, pad, g.h);
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        const int64_t w0 = pool_window_begin(ow, stride, pad), w1 = pool_window_end(ow, k, stride, pad, g.w);
        T best = -std::numeric_limits<T>::infinity();
        int64_t bi = h0 * g.w + w0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) {
            const T v = xp[h * g.xs[2] + w * g.xs[3]];
            if (max_pool_takes(v, best)) {  // NaN propagates, as in PyTorch
              best = v;
              bi = h * g.w + w;
            }
          }
        yp[oh * g.wo + ow] = best;
        ip[oh * g.wo + ow] = bi;
      }
    }
  }
}

template <typename T>
void max_pool2d_backward_cpu(const T* dy, const int64_t* idx, const Plane2d& g, T* dx) {
  const int64_t planes = g.n * g.c;
#pragma omp parallel for schedule(static) if (par_for(planes * g.h * g.w))
  for (int64_t p = 0; p < planes; ++p) {
    T* dp = dx + p * g.h * g.w;
    std::fill(dp, dp + g.h * g.w, T(0));
    const T* gp = dy + p * g.ho * g.wo;
    const int64_t* ip = idx + p * g.ho * g.wo;
    for (int64_t o = 0; o < g.ho * g.wo; ++o) dp[ip[o]] += gp[o];
  }
}

/// avg_pool2d(k 2, stride 1, pad 0) on rows of unit stride (ADown / AConv of YOLOv9), one output
/// row from two input rows in a loop the compiler vectorises. Each output sums its window in the
/// generic kernel's order (0 + x[i][j], + x[i][j+1], + x[i+1][j], + x[i+1][j+1]), so the results
/// are bit-identical to it.
template <typename T>
void avg_pool2d_k2s1_plane(const T* xp, const Plane2d& g, T inv, T* yp) {
  for (int64_t oh = 0; oh < g.ho; ++oh) {
    const T* r0 = xp + oh * g.xs[2];
    const T* r1 = r0 + g.xs[2];
    T* out = yp + oh * g.wo;
    for (int64_t ow = 0; ow < g.wo; ++ow) out[ow] = (((T(0) + r0[ow]) + r0[ow + 1]) + r1[ow] + r1[ow + 1]) * inv;
  }
}

template <typename T>
void avg_pool2d_forward_cpu(const T* x, const Plane2d& g, int64_t k, int64_t stride, int64_t pad, T* y) {
  const int64_t planes = g.n * g.c;
  const T inv = T(1) / static_cast<T>(k * k);
  const bool k2s1 = k == 2 && stride == 1 && pad == 0 && g.xs[3] == 1;
#pragma omp parallel for schedule(static) if (par_for(planes * g.ho * g.wo * k * k))
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = x + (p / g.c) * g.xs[0] + (p % g.c) * g.xs[1];
    T* yp = y + p * g.ho * g.wo;
    if (k2s1) {
      avg_pool2d_k2s1_plane(xp, g, inv, yp);
      continue;
    }
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      const int64_t h0 = pool_window_begin(oh, stride, pad), h1 = pool_window_end(oh, k, stride, pad, g.h);
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        const int64_t w0 = pool_window_begin(ow, stride, pad), w1 = pool_window_end(ow, k, stride, pad, g.w);
        T acc = T(0);
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) acc += xp[h * g.xs[2] + w * g.xs[3]];
        yp[oh * g.wo + ow] = acc * inv;
      }
    }
  }
}

template <typename T>
void avg_pool2d_backward_cpu(const T* dy, const Plane2d& g, int64_t k, int64_t stride, int64_t pad, T* dx) {
  const int64_t planes = g.n * g.c;
  const T inv = T(1) / static_cast<T>(k * k);
#pragma omp parallel for schedule(static) if (par_for(planes * g.h * g.w))
  for (int64_t p = 0; p < planes; ++p) {
    T* dp = dx + p * g.h * g.w;
    std::fill(dp, dp + g.h * g.w, T(0));
    const T* gp = dy + p * g.ho * g.wo;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      const int64_t h0 = pool_window_begin(oh, stride, pad), h1 = pool_window_end(oh, k, stride, pad, g.h);
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        const int64_t w0 = pool_window_begin(ow, stride, pad), w1 = pool_window_end(ow, k, stride, pad, g.w);
        const T v = gp[oh * g.wo + ow] * inv;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) dp[h * g.w + w] += v;
      }
    }
  }
}

// --- entries -------------------------------------------------------------------------------------------

using engine::DeviceContext;
using engine::DType;

void upsample_fwd(DeviceContext&, DType dt, const void* x, const Plane2d& g, int64_t s, void* y) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    upsample_nearest_forward_cpu(static_cast<const T*>(x), g, s, static_cast<T*>(y));
  });
}
void upsample_bwd(DeviceContext&, DType dt, const void* dy, const Plane2d& g, int64_t s, void* dx) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    upsample_nearest_backward_cpu(static_cast<const T*>(dy), g, s, static_cast<T*>(dx));
  });
}
void max_pool_fwd(DeviceContext&, DType dt, const void* x, const Plane2d& g, int64_t k, int64_t stride, int64_t pad,
                  void* y, int64_t* idx) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    max_pool2d_forward_cpu(static_cast<const T*>(x), g, k, stride, pad, static_cast<T*>(y), idx);
  });
}
void max_pool_bwd(DeviceContext&, DType dt, const void* dy, const int64_t* idx, const Plane2d& g, int64_t /*k*/,
                  int64_t /*stride*/, int64_t /*pad*/, void* dx) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    max_pool2d_backward_cpu(static_cast<const T*>(dy), idx, g, static_cast<T*>(dx));
  });
}
void avg_pool_fwd(DeviceContext&, DType dt, const void* x, const Plane2d& g, int64_t k, int64_t stride, int64_t pad,
                  void* y) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    avg_pool2d_forward_cpu(static_cast<const T*>(x), g, k, stride, pad, static_cast<T*>(y));
  });
}
void avg_pool_bwd(DeviceContext&, DType dt, const void* dy, const Plane2d& g, int64_t k, int64_t stride, int64_t pad,
                  void* dx) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    avg_pool2d_backward_cpu(static_cast<const T*>(dy), g, k, stride, pad, static_cast<T*>(dx));
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kUpsampleNearestForward, &upsample_fwd, engine::kF32F64);
  b.add(kUpsampleNearestBackward, &upsample_bwd, engine::kF32F64);
  b.add(kMaxPool2dForward, &max_pool_fwd, engine::kF32F64);
  b.add(kMaxPool2dBackward, &max_pool_bwd, engine::kF32F64);
  b.add(kAvgPool2dForward, &avg_pool_fwd, engine::kF32F64);
  b.add(kAvgPool2dBackward, &avg_pool_bwd, engine::kF32F64);
}

}  // namespace kernels::cpu
