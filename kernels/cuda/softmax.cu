// CUDA softmax / log_softmax entries (issue 11) over one dim of a contiguous [outer, n, inner]
// tensor, with the element math of the CPU twin (kernels/common/linalg.h, kernels/cpu/linalg.cpp).
// Three shapes of work:
//  - inner == 1, n <= kWarpRowMax: a warp per row (a row is n contiguous elements);
//  - inner == 1, longer rows: a block of kRowBlock threads per row;
//  - inner > 1: a thread per (outer, inner) column, looping over n (neighbouring threads read
//    neighbouring elements, so the loads coalesce).
// Every reduction runs in a fixed order (strided per-thread partials, then a shuffle tree), so
// results are bitwise reproducible. Compute in float for F32/F16/BF16 and double for F64 (the
// CPU twin sums in double). TODO: few long columns (inner > 1, outer * inner small, n large) run
// one thread per column serially; a split over n would fill the device there.

#include <cuda_runtime.h>

#include <cmath>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/linalg.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

using engine::DType;

namespace {

constexpr int kWarp = 32;
constexpr int kRowBlock = 512;  // threads per block in the block-per-row kernels
constexpr int kWarpsPerBlock = kBlock / kWarp;
constexpr int64_t kWarpRowMax = 1024;  // rows (inner == 1) up to this length use a warp each

struct SumOp {
  template <typename C> __device__ C operator()(C a, C b) const { return a + b; }
  template <typename C> __device__ static C identity() { return C(0); }
};
struct MaxOp {  // the CPU's std::max(acc, v): a NaN v leaves acc
  template <typename C> __device__ C operator()(C acc, C v) const { return acc < v ? v : acc; }
  template <typename C> __device__ static C identity() { return -C(INFINITY); }
};

/// The reduction of v over the 32 lanes of the calling warp, returned to every lane.
template <typename C, typename Op>
__device__ __forceinline__ C warp_all_reduce(C v, Op op) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  return __shfl_sync(0xffffffffu, v, 0);
}

/// The reduction of v over the block (kRowBlock threads), returned to every thread; `scratch`
/// holds kRowBlock / kWarp + 1 values of shared memory. Ends with a barrier, so the caller may
/// reuse `scratch` right away.
template <typename C, typename Op>
__device__ __forceinline__ C block_all_reduce(C v, Op op, C* scratch) {
  v = warp_all_reduce(v, op);
  if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    C w = threadIdx.x < kRowBlock / kWarp ? scratch[threadIdx.x] : Op::template identity<C>();
    w = warp_all_reduce(w, op);
    if (threadIdx.x == 0) scratch[kRowBlock / kWarp] = w;
  }
  __syncthreads();
  const C r = scratch[kRowBlock / kWarp];
  __syncthreads();  // every thread has read the result before scratch is reused
  return r;
}

// --- forward --------------------------------------------------------------------------------------

template <typename T>
__global__ void softmax_fwd_warp_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n,
                                        bool log) {
  using S = Scalar<T>;
  using C = typename S::C;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps_total = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarp; r < rows; r += warps_total) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    C mx = MaxOp::identity<C>();
    for (int64_t i = lane; i < n; i += kWarp) mx = MaxOp()(mx, S::load(xr[i]));
    mx = warp_all_reduce(mx, MaxOp());
    C sum = C(0);
    for (int64_t i = lane; i < n; i += kWarp) sum += k_exp(S::load(xr[i]) - mx);
    sum = warp_all_reduce(sum, SumOp());
    const C norm = softmax_norm(mx, sum, log);
    for (int64_t i = lane; i < n; i += kWarp) yr[i] = S::store(softmax_out(S::load(xr[i]), mx, norm, log));
  }
}

template <typename T>
__global__ void softmax_fwd_block_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n,
                                         bool log) {
  using S = Scalar<T>;
  using C = typename S::C;
  __shared__ C scratch[kRowBlock / kWarp + 1];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    C mx = MaxOp::identity<C>();
    for (int64_t i = threadIdx.x; i < n; i += kRowBlock) mx = MaxOp()(mx, S::load(xr[i]));
    mx = block_all_reduce(mx, MaxOp(), scratch);
    C sum = C(0);
    for (int64_t i = threadIdx.x; i < n; i += kRowBlock) sum += k_exp(S::load(xr[i]) - mx);
    sum = block_all_reduce(sum, SumOp(), scratch);
    const C norm = softmax_norm(mx, sum, log);
    for (int64_t i = threadIdx.x; i < n; i += kRowBlock) yr[i] = S::store(softmax_out(S::load(xr[i]), mx, norm, log));
  }
}

// Column c = (o, j) of outer * inner: the elements x[o, d, j], d < n, stride inner.
template <typename T>
__global__ void softmax_fwd_column_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                                          int64_t inner, bool log) {
  using S = Scalar<T>;
  using C = typename S::C;
  const int64_t cols = outer * inner;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    C mx = MaxOp::identity<C>();
    for (int64_t d = 0; d < n; ++d) mx = MaxOp()(mx, S::load(x[base + d * inner]));
    C sum = C(0);
    for (int64_t d = 0; d < n; ++d) sum += k_exp(S::load(x[base + d * inner]) - mx);
    const C norm = softmax_norm(mx, sum, log);
    for (int64_t d = 0; d < n; ++d) {
      const int64_t o = base + d * inner;
      y[o] = S::store(softmax_out(S::load(x[o]), mx, norm, log));
    }
  }
}

// --- backward -------------------------------------------------------------------------------------

template <typename T>
__global__ void softmax_bwd_warp_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                        int64_t rows, int64_t n, bool log) {
  using S = Scalar<T>;
  using C = typename S::C;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps_total = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarp; r < rows; r += warps_total) {
    const int64_t b = r * n;
    C s = C(0);
    for (int64_t i = lane; i < n; i += kWarp) s += softmax_bwd_term(S::load(y[b + i]), S::load(dy[b + i]), log);
    s = warp_all_reduce(s, SumOp());
    for (int64_t i = lane; i < n; i += kWarp)
      dx[b + i] = S::store(softmax_bwd_out(S::load(y[b + i]), S::load(dy[b + i]), s, log));
  }
}

template <typename T>
__global__ void softmax_bwd_block_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                         int64_t rows, int64_t n, bool log) {
  using S = Scalar<T>;
  using C = typename S::C;
  __shared__ C scratch[kRowBlock / kWarp + 1];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t b = r * n;
    C s = C(0);
    for (int64_t i = threadIdx.x; i < n; i += kRowBlock)
      s += softmax_bwd_term(S::load(y[b + i]), S::load(dy[b + i]), log);
    s = block_all_reduce(s, SumOp(), scratch);
    for (int64_t i = threadIdx.x; i < n; i += kRowBlock)
      dx[b + i] = S::store(softmax_bwd_out(S::load(y[b + i]), S::load(dy[b + i]), s, log));
  }
}

template <typename T>
__global__ void softmax_bwd_column_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                                          int64_t outer, int64_t n, int64_t inner, bool log) {
  using S = Scalar<T>;
  using C = typename S::C;
  const int64_t cols = outer * inner;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    C s = C(0);
    for (int64_t d = 0; d < n; ++d) {
      const int64_t o = base + d * inner;
      s += softmax_bwd_term(S::load(y[o]), S::load(dy[o]), log);
    }
    for (int64_t d = 0; d < n; ++d) {
      const int64_t o = base + d * inner;
      dx[o] = S::store(softmax_bwd_out(S::load(y[o]), S::load(dy[o]), s, log));
    }
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535LL * 16 ? rows : 65535LL * 16); }

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

// --- entries (signatures and semantics: kernels/common/linalg.h) -------------------------------

/// softmax_forward on CUDA: x, y contiguous [outer, n, inner] of one dtype (F32/F64/F16/BF16);
/// y = softmax (or log_softmax when `log`) of x over n, max-subtracted.
void softmax_fwd(engine::DeviceContext& ctx, DType dt, const void* x, void* y, int64_t outer, int64_t n,
                 int64_t inner, bool log) {
  cudaStream_t st = stream_of(ctx);
  const bool ok = dispatch_float(dt, [&]<typename T>() {
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (outer == 0 || n == 0 || inner == 0) return;
    if (inner > 1)
      Y9_LAUNCH(softmax_fwd_column_kernel<T>, grid_for(outer * inner), kBlock, 0, st, xt, yt, outer, n, inner, log);
    else if (n <= kWarpRowMax)
      Y9_LAUNCH(softmax_fwd_warp_kernel<T>, grid_for(outer * kWarp), kBlock, 0, st, xt, yt, outer, n, log);
    else
      Y9_LAUNCH(softmax_fwd_block_kernel<T>, row_blocks(outer), kRowBlock, 0, st, xt, yt, outer, n, log);
  });
  Y9_CHECK_SHAPE(ok, log ? "log_softmax" : "softmax", ": dtype ", engine::dtype_name(dt),
                 " not supported on cuda (f32, f64, f16, bf16)");
}

/// softmax_backward on CUDA: from the forward output y and dy (contiguous [outer, n, inner], one
/// dtype), dx (overwritten) = y * (dy - sum(dy * y)) for softmax, dy - exp(y) * sum(dy) for
/// log_softmax, the sums over n.
void softmax_bwd(engine::DeviceContext& ctx, DType dt, const void* y, const void* dy, void* dx, int64_t outer,
                 int64_t n, int64_t inner, bool log) {
  cudaStream_t st = stream_of(ctx);
  const bool ok = dispatch_float(dt, [&]<typename T>() {
    const T* yt = static_cast<const T*>(y);
    const T* gt = static_cast<const T*>(dy);
    T* gx = static_cast<T*>(dx);
    if (outer == 0 || n == 0 || inner == 0) return;
    if (inner > 1)
      Y9_LAUNCH(softmax_bwd_column_kernel<T>, grid_for(outer * inner), kBlock, 0, st, yt, gt, gx, outer, n, inner,
                log);
    else if (n <= kWarpRowMax)
      Y9_LAUNCH(softmax_bwd_warp_kernel<T>, grid_for(outer * kWarp), kBlock, 0, st, yt, gt, gx, outer, n, log);
    else
      Y9_LAUNCH(softmax_bwd_block_kernel<T>, row_blocks(outer), kRowBlock, 0, st, yt, gt, gx, outer, n, log);
  });
  Y9_CHECK_SHAPE(ok, log ? "log_softmax backward" : "softmax backward", ": dtype ", engine::dtype_name(dt),
                 " not supported on cuda (f32, f64, f16, bf16)");
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kSoftmaxForward, &softmax_fwd, engine::kFloating);
  b.add(kSoftmaxBackward, &softmax_bwd, engine::kFloating);
}

}  // namespace kernels::cuda
