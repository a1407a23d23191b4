// CUDA CBFuse entries (kernels/common/cbfuse.h), the PGI auxiliary branch's fusion (issue 11):
// the forward sums the nearest-upsampled strided pieces and x in one pass (one thread per output
// element, pieces read in place through their strides: no upsampled copies, no intermediate sums),
// the backward writes every piece's gradient (the nearest-upsample backward) in one launch (one
// thread per gradient element, a gather: no atomics, deterministic). Pieces go to the kernel by
// value in groups of up to kGroup (one launch per group; the model routes at most 5). The order
// and rounding are those of the unfused ops and of the CPU twin (kernels/cpu/cbfuse.cpp): every
// add rounded to the dtype, pieces in order, x last; F16/BF16 and F32 compute in float, F64 in
// double.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/cbfuse.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

using engine::DType;

namespace {

constexpr int kGroup = 8;  // pieces per launch

/// Up to kGroup pieces of one forward launch.
struct FwdGroup {
  CBFusePiece p[kGroup];
  int n;
};

/// Up to kGroup piece gradients of one backward launch: piece j's gradient pointer and factor,
/// and its first element in the launch's packed index space (start[j + 1] - start[j] is its
/// element count; start[n] the launch's total).
struct BwdGroup {
  void* dx[kGroup];
  int64_t f[kGroup];
  int64_t start[kGroup + 1];
  int n;
};

/// The value of `v` once stored in T: the rounding of a separate add's output.
template <typename T>
__device__ __forceinline__ typename Scalar<T>::C rounded(typename Scalar<T>::C v) {
  return Scalar<T>::load(Scalar<T>::store(v));
}

// out[i] over the contiguous [N,C,H,W]: continues the sum held in out (unless `first`) with the
// group's pieces, then adds x when `last`. The piece loop is unrolled over kGroup so the group is
// indexed statically (kernel parameters, no local-memory copy).
template <typename T>
__global__ void cbfuse_fwd_kernel(FwdGroup grp, const T* __restrict__ x, CBFuseGeom g, bool first, bool last,
                                  T* __restrict__ out, int64_t total) {
  using S = Scalar<T>;
  using C = typename S::C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = i % g.w, t = i / g.w, y = t % g.h, nc = t / g.h, c = nc % g.c, n = nc / g.c;
    bool have = !first;
    C acc = have ? S::load(out[i]) : C(0);
#pragma unroll
    for (int k = 0; k < kGroup; ++k) {
      if (k >= grp.n) break;
      const CBFusePiece& p = grp.p[k];
      const C v = S::load(
          static_cast<const T*>(p.data)[n * p.s[0] + c * p.s[1] + (y / p.f) * p.s[2] + (w / p.f) * p.s[3]]);
      acc = have ? rounded<T>(acc + v) : v;  // the unfused sum starts from piece 0 itself
      have = true;
    }
    if (last) {
      const C xv = S::load(x[n * g.xs[0] + c * g.xs[1] + y * g.xs[2] + w * g.xs[3]]);
      acc = have ? acc + xv : xv;
    }
    out[i] = S::store(acc);
  }
}

// Piece j's dx[n,c,h,w] = sum over a (rows), then b (columns) of dy[n,c,h*f+a,w*f+b], each row's f
// terms summed first (upsample_nearest_bwd_kernel's order); f == 1 copies dy (the unfused
// gradient is dy itself).
template <typename T>
__global__ void cbfuse_bwd_kernel(const T* __restrict__ dy, CBFuseGeom g, BwdGroup grp, int64_t total) {
  using S = Scalar<T>;
  using C = typename S::C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    T* dx = nullptr;
    int64_t f = 1, l = 0;
#pragma unroll
    for (int k = 0; k < kGroup; ++k)
      if (k < grp.n && i >= grp.start[k] && i < grp.start[k + 1]) {
        dx = static_cast<T*>(grp.dx[k]);
        f = grp.f[k];
        l = i - grp.start[k];
      }
    const int64_t wp = g.w / f, hp = g.h / f;
    const int64_t w = l % wp, t = l / wp, h = t % hp, nc = t / hp;
    if (f == 1) {
      dx[l] = dy[(nc * g.h + h) * g.w + w];
      continue;
    }
    C acc = C(0);
    for (int64_t a = 0; a < f; ++a) {
      const T* src = dy + (nc * g.h + h * f + a) * g.w + w * f;
      C row = C(0);
      for (int64_t b = 0; b < f; ++b) row += S::load(src[b]);
      acc += row;
    }
    dx[l] = S::store(acc);
  }
}

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

void check_dtype(bool ok, const char* op, DType dt) {
  Y9_CHECK_SHAPE(ok, op, ": dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64, f16, bf16)");
}

// --- entries (signatures and semantics: kernels/common/cbfuse.h) -------------------------------

/// cbfuse_forward on CUDA: out contiguous [N,C,H,W] (overwritten) = the pieces (strided device
/// views [N,C,H/f,W/f]) nearest-upsampled and summed in order, every add rounded to the dtype,
/// plus x (strided [N,C,H,W]) last. One launch for up to kGroup pieces; a longer list continues
/// the (rounded) sum in out, launch by launch.
void cbfuse_fwd(engine::DeviceContext& ctx, DType dt, const CBFusePiece* pieces, int np, const void* x,
                const CBFuseGeom& g, void* out) {
  const int64_t total = g.n * g.c * g.h * g.w;
  check_dtype(dispatch_float(dt, [&]<typename T>() {
                if (total == 0) return;
                int k = 0;
                do {
                  FwdGroup grp{};
                  const bool first = k == 0;
                  while (grp.n < kGroup && k < np) grp.p[grp.n++] = pieces[k++];
                  Y9_LAUNCH(cbfuse_fwd_kernel<T>, grid_for(total), kBlock, 0, stream_of(ctx), grp,
                            static_cast<const T*>(x), g, first, k == np, static_cast<T*>(out), total);
                } while (k < np);
              }),
              "cbfuse", dt);
}

/// cbfuse_backward on CUDA: dxs[i] contiguous [N,C,H/f_i,W/f_i] (overwritten; null skipped) =
/// the nearest-upsample backward of dy contiguous [N,C,H,W] by factors[i]. One launch for up to
/// kGroup pieces.
void cbfuse_bwd(engine::DeviceContext& ctx, DType dt, const void* dy, const CBFuseGeom& g, const int64_t* factors,
                void* const* dxs, int np) {
  check_dtype(dispatch_float(dt, [&]<typename T>() {
                BwdGroup grp{};
                auto flush = [&] {
                  const int64_t count = grp.start[grp.n];
                  if (count > 0)
                    Y9_LAUNCH(cbfuse_bwd_kernel<T>, grid_for(count), kBlock, 0, stream_of(ctx),
                              static_cast<const T*>(dy), g, grp, count);
                  grp = BwdGroup{};
                };
                for (int i = 0; i < np; ++i) {
                  const int64_t f = factors[i], count = g.n * g.c * (g.h / f) * (g.w / f);
                  if (dxs[i] == nullptr || count == 0) continue;
                  const int j = grp.n;
                  grp.dx[j] = dxs[i];
                  grp.f[j] = f;
                  grp.start[j + 1] = grp.start[j] + count;
                  if (++grp.n == kGroup) flush();
                }
                if (grp.n > 0) flush();
              }),
              "cbfuse backward", dt);
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kCBFuseForward, &cbfuse_fwd, engine::kFloating);
  b.add(kCBFuseBackward, &cbfuse_bwd, engine::kFloating);
}

}  // namespace kernels::cuda
