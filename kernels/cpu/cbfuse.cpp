// CBFuse CPU twin (kernels/common/cbfuse.h): the sum of nearest-upsampled strided pieces plus x,
// and the per-piece nearest-upsample backward. Parallel over output rows (forward) and gradient
// rows (backward): every thread writes a disjoint region, no atomics, deterministic. The order of
// the adds is that of the unfused ops (upsample_nearest, then ops::add pairwise, x last), and the
// backward that of upsample_nearest_backward_cpu (kernels/cpu/spatial.cpp), so the results are
// bitwise those of the unfused composition.
#include <cstring>

#include "kernels/common/cbfuse.h"
#include "kernels/cpu/dispatch.h"

namespace kernels::cpu {

namespace {
inline bool par_for(int64_t work) { return work > 32768; }

template <typename T>
void cbfuse_forward_cpu(const CBFusePiece* pieces, int np, const T* x, const CBFuseGeom& g, T* out) {
  const int64_t rows = g.n * g.c * g.h;
#pragma omp parallel for schedule(static) if (par_for(rows * g.w * (np + 1)))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t y = r % g.h, nc = r / g.h, c = nc % g.c, n = nc / g.c;
    const T* xr = x + n * g.xs[0] + c * g.xs[1] + y * g.xs[2];
    T* dst = out + r * g.w;
    if (np == 0) {
      for (int64_t w = 0; w < g.w; ++w) dst[w] = xr[w * g.xs[3]];
      continue;
    }
    // Piece 0 as is (the unfused sum starts from it, no add), then one rounded add per piece.
    for (int i = 0; i < np; ++i) {
      const CBFusePiece& p = pieces[i];
      const T* pr = static_cast<const T*>(p.data) + n * p.s[0] + c * p.s[1] + (y / p.f) * p.s[2];
      const int64_t sw = p.s[3], f = p.f;
      if (i == 0) {
        for (int64_t w = 0; w < g.w; ++w) dst[w] = pr[(w / f) * sw];
      } else {
        for (int64_t w = 0; w < g.w; ++w) dst[w] = dst[w] + pr[(w / f) * sw];
      }
    }
    for (int64_t w = 0; w < g.w; ++w) dst[w] = dst[w] + xr[w * g.xs[3]];
  }
}

// dx [N, C, H/f, W/f] from dy [N, C, H, W] (both contiguous): upsample_nearest_backward_cpu's loop.
template <typename T>
void cbfuse_backward_piece_cpu(const T* dy, const CBFuseGeom& g, int64_t f, T* dx) {
  const int64_t hp = g.h / f, wp = g.w / f, rows = g.n * g.c * hp;
  if (f == 1) {
    std::memcpy(dx, dy, static_cast<size_t>(rows * wp) * sizeof(T));
    return;
  }
#pragma omp parallel for schedule(static) if (par_for(rows * g.w * f))
  for (int64_t r = 0; r < rows; ++r) {
    T* dst = dx + r * wp;
    const int64_t i = r % hp, nc = r / hp;
    for (int64_t w = 0; w < wp; ++w) dst[w] = T(0);
    for (int64_t a = 0; a < f; ++a) {
      const T* src = dy + (nc * g.h + i * f + a) * g.w;
      for (int64_t w = 0; w < wp; ++w) {
        T acc = T(0);
        for (int64_t b = 0; b < f; ++b) acc += src[w * f + b];
        dst[w] += acc;
      }
    }
  }
}

// --- entries -------------------------------------------------------------------------------------------

using engine::DeviceContext;
using engine::DType;

/// cbfuse_forward on the CPU (F32/F64); semantics in kernels/common/cbfuse.h.
void cbfuse_fwd(DeviceContext&, DType dt, const CBFusePiece* pieces, int np, const void* x, const CBFuseGeom& g,
                void* out) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    cbfuse_forward_cpu(pieces, np, static_cast<const T*>(x), g, static_cast<T*>(out));
  });
}

/// cbfuse_backward on the CPU (F32/F64); semantics in kernels/common/cbfuse.h.
void cbfuse_bwd(DeviceContext&, DType dt, const void* dy, const CBFuseGeom& g, const int64_t* factors,
                void* const* dxs, int np) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    for (int i = 0; i < np; ++i)
      if (dxs[i] != nullptr)
        cbfuse_backward_piece_cpu(static_cast<const T*>(dy), g, factors[i], static_cast<T*>(dxs[i]));
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kCBFuseForward, &cbfuse_fwd, engine::kF32F64);
  b.add(kCBFuseBackward, &cbfuse_bwd, engine::kF32F64);
}

}  // namespace kernels::cpu
