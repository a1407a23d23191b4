// CUDA spatial entries on NCHW planes (issue 11): nearest upsampling, max and average 2-d pooling,
// forward and backward, with the semantics of the CPU twins (kernels/cpu/spatial.cpp) and the
// window math they share (kernels/common/spatial.h). One thread per element written (output in
// the forwards, input gradient in the backwards), 64-bit grid-stride loops. The backward kernels
// are gathers (each input gradient summed by one thread over the outputs that read it, in the
// order the CPU scatter adds them): no atomics, deterministic. F16/BF16 and F32 compute in float,
// F64 in double.

#include <cuda_runtime.h>

#include <cmath>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/spatial.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

using engine::DType;

namespace {

// y[n,c,i,j] = x[n,c,i/s,j/s] over the contiguous output [N,C,Ho,Wo] (`total` elements).
template <typename T>
__global__ void upsample_nearest_fwd_kernel(const T* __restrict__ x, Plane2d g, int64_t s, T* __restrict__ y,
                                            int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = i % g.wo, t = i / g.wo, oh = t % g.ho, nc = t / g.ho;
    const int64_t c = nc % g.c, n = nc / g.c;
    y[i] = x[n * g.xs[0] + c * g.xs[1] + (oh / s) * g.xs[2] + (ow / s) * g.xs[3]];
  }
}

// dx[n,c,h,w] = sum over a (rows), then b (columns) of dy[n,c,h*s+a,w*s+b], each row's s terms
// summed first (the CPU's order).
template <typename T>
__global__ void upsample_nearest_bwd_kernel(const T* __restrict__ dy, Plane2d g, int64_t s, T* __restrict__ dx,
                                            int64_t total) {
  using S = Scalar<T>;
  using C = typename S::C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = i % g.w, t = i / g.w, h = t % g.h, nc = t / g.h;
    C acc = C(0);
    for (int64_t a = 0; a < s; ++a) {
      const T* src = dy + (nc * g.ho + h * s + a) * g.wo + w * s;
      C row = C(0);
      for (int64_t b = 0; b < s; ++b) row += S::load(src[b]);
      acc += row;
    }
    dx[i] = S::store(acc);
  }
}

template <typename T>
__global__ void max_pool2d_fwd_kernel(const T* __restrict__ x, Plane2d g, int64_t k, int64_t stride, int64_t pad,
                                      T* __restrict__ y, int64_t* __restrict__ idx, int64_t total) {
  using S = Scalar<T>;
  using C = typename S::C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = i % g.wo, t = i / g.wo, oh = t % g.ho, p = t / g.ho;
    const T* xp = x + (p / g.c) * g.xs[0] + (p % g.c) * g.xs[1];
    const int64_t h0 = pool_window_begin(oh, stride, pad), h1 = pool_window_end(oh, k, stride, pad, g.h);
    const int64_t w0 = pool_window_begin(ow, stride, pad), w1 = pool_window_end(ow, k, stride, pad, g.w);
    C best = -C(INFINITY);
    int64_t bi = h0 * g.w + w0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const C v = S::load(xp[h * g.xs[2] + w * g.xs[3]]);
        if (max_pool_takes(v, best)) {
          best = v;
          bi = h * g.w + w;
        }
      }
    y[i] = S::store(best);
    idx[i] = bi;
  }
}

// dx[p,h,w] = sum of dy[p,o] over the outputs o whose window holds (h,w) and whose argmax is it.
template <typename T>
__global__ void max_pool2d_bwd_kernel(const T* __restrict__ dy, const int64_t* __restrict__ idx, Plane2d g,
                                      int64_t k, int64_t stride, int64_t pad, T* __restrict__ dx, int64_t total) {
  using S = Scalar<T>;
  using C = typename S::C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = i % g.w, t = i / g.w, h = t % g.h, p = t / g.h;
    int64_t oh0, oh1, ow0, ow1;
    pool_outputs_of(h, k, stride, pad, g.ho, &oh0, &oh1);
    pool_outputs_of(w, k, stride, pad, g.wo, &ow0, &ow1);
    const int64_t self = h * g.w + w, base = p * g.ho * g.wo;
    C acc = C(0);
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t o = base + oh * g.wo + ow;
        if (idx[o] == self) acc += S::load(dy[o]);
      }
    dx[i] = S::store(acc);
  }
}

template <typename T>
__global__ void avg_pool2d_fwd_kernel(const T* __restrict__ x, Plane2d g, int64_t k, int64_t stride, int64_t pad,
                                      typename Scalar<T>::C inv, T* __restrict__ y, int64_t total) {
  using S = Scalar<T>;
  using C = typename S::C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = i % g.wo, t = i / g.wo, oh = t % g.ho, p = t / g.ho;
    const T* xp = x + (p / g.c) * g.xs[0] + (p % g.c) * g.xs[1];
    const int64_t h0 = pool_window_begin(oh, stride, pad), h1 = pool_window_end(oh, k, stride, pad, g.h);
    const int64_t w0 = pool_window_begin(ow, stride, pad), w1 = pool_window_end(ow, k, stride, pad, g.w);
    C acc = C(0);
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) acc += S::load(xp[h * g.xs[2] + w * g.xs[3]]);
    y[i] = S::store(acc * inv);
  }
}

// dx[p,h,w] = sum of dy[p,o] / (k*k) over the outputs o whose window holds (h,w).
template <typename T>
__global__ void avg_pool2d_bwd_kernel(const T* __restrict__ dy, Plane2d g, int64_t k, int64_t stride, int64_t pad,
                                      typename Scalar<T>::C inv, T* __restrict__ dx, int64_t total) {
  using S = Scalar<T>;
  using C = typename S::C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = i % g.w, t = i / g.w, h = t % g.h, p = t / g.h;
    int64_t oh0, oh1, ow0, ow1;
    pool_outputs_of(h, k, stride, pad, g.ho, &oh0, &oh1);
    pool_outputs_of(w, k, stride, pad, g.wo, &ow0, &ow1);
    const T* gp = dy + p * g.ho * g.wo;
    C acc = C(0);
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) acc += S::load(gp[oh * g.wo + ow]) * inv;
    dx[i] = S::store(acc);
  }
}

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

void check_dtype(bool ok, const char* op, DType dt) {
  Y9_CHECK_SHAPE(ok, op, ": dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64, f16, bf16)");
}

// --- entries (signatures and semantics: kernels/common/spatial.h) ------------------------------

/// upsample_nearest_forward on CUDA: x [N,C,H,W] with strides g.xs (any dtype of kFloating), y
/// contiguous [N,C,H*s,W*s] of the same dtype; y[n,c,i,j] = x[n,c,i/s,j/s].
void upsample_fwd(engine::DeviceContext& ctx, DType dt, const void* x, const Plane2d& g, int64_t s, void* y) {
  const int64_t total = g.n * g.c * g.ho * g.wo;
  check_dtype(dispatch_float(dt, [&]<typename T>() {
                if (total == 0) return;
                Y9_LAUNCH(upsample_nearest_fwd_kernel<T>, grid_for(total), kBlock, 0, stream_of(ctx),
                          static_cast<const T*>(x), g, s, static_cast<T*>(y), total);
              }),
              "upsample_nearest", dt);
}

/// upsample_nearest_backward on CUDA: dy contiguous [N,C,Ho,Wo] -> dx contiguous [N,C,H,W]
/// (overwritten), dx[n,c,i,j] = sum of the s*s dy elements that copied x[n,c,i,j].
void upsample_bwd(engine::DeviceContext& ctx, DType dt, const void* dy, const Plane2d& g, int64_t s, void* dx) {
  const int64_t total = g.n * g.c * g.h * g.w;
  check_dtype(dispatch_float(dt, [&]<typename T>() {
                if (total == 0) return;
                Y9_LAUNCH(upsample_nearest_bwd_kernel<T>, grid_for(total), kBlock, 0, stream_of(ctx),
                          static_cast<const T*>(dy), g, s, static_cast<T*>(dx), total);
              }),
              "upsample_nearest backward", dt);
}

/// max_pool2d_forward on CUDA: x [N,C,H,W] strided -> y contiguous [N,C,Ho,Wo] and idx (I64, the
/// argmax h*W + w in the input plane; first maximum in row-major window order, NaN wins).
void max_pool_fwd(engine::DeviceContext& ctx, DType dt, const void* x, const Plane2d& g, int64_t k, int64_t stride,
                  int64_t pad, void* y, int64_t* idx) {
  const int64_t total = g.n * g.c * g.ho * g.wo;
  check_dtype(dispatch_float(dt, [&]<typename T>() {
                if (total == 0) return;
                Y9_LAUNCH(max_pool2d_fwd_kernel<T>, grid_for(total), kBlock, 0, stream_of(ctx),
                          static_cast<const T*>(x), g, k, stride, pad, static_cast<T*>(y), idx, total);
              }),
              "max_pool2d", dt);
}

/// max_pool2d_backward on CUDA: dx contiguous [N,C,H,W] (overwritten) = the scatter-add of dy
/// contiguous [N,C,Ho,Wo] at idx (I64, from max_pool_fwd), computed as a gather over the outputs
/// whose k x k windows (stride, pad) hold each input, in the CPU scatter's order.
void max_pool_bwd(engine::DeviceContext& ctx, DType dt, const void* dy, const int64_t* idx, const Plane2d& g,
                  int64_t k, int64_t stride, int64_t pad, void* dx) {
  const int64_t total = g.n * g.c * g.h * g.w;
  check_dtype(dispatch_float(dt, [&]<typename T>() {
                if (total == 0) return;
                Y9_LAUNCH(max_pool2d_bwd_kernel<T>, grid_for(total), kBlock, 0, stream_of(ctx),
                          static_cast<const T*>(dy), idx, g, k, stride, pad, static_cast<T*>(dx), total);
              }),
              "max_pool2d backward", dt);
}

/// avg_pool2d_forward on CUDA: x [N,C,H,W] strided -> y contiguous [N,C,Ho,Wo], every window
/// divided by k*k (zero padding counted, count_include_pad=true).
void avg_pool_fwd(engine::DeviceContext& ctx, DType dt, const void* x, const Plane2d& g, int64_t k, int64_t stride,
                  int64_t pad, void* y) {
  const int64_t total = g.n * g.c * g.ho * g.wo;
  check_dtype(dispatch_float(dt, [&]<typename T>() {
                using C = typename Scalar<T>::C;
                if (total == 0) return;
                Y9_LAUNCH(avg_pool2d_fwd_kernel<T>, grid_for(total), kBlock, 0, stream_of(ctx),
                          static_cast<const T*>(x), g, k, stride, pad, C(1) / static_cast<C>(k * k),
                          static_cast<T*>(y), total);
              }),
              "avg_pool2d", dt);
}

/// avg_pool2d_backward on CUDA: dy contiguous [N,C,Ho,Wo] -> dx contiguous [N,C,H,W]
/// (overwritten), each input gradient the sum of dy/(k*k) over the windows that hold it.
void avg_pool_bwd(engine::DeviceContext& ctx, DType dt, const void* dy, const Plane2d& g, int64_t k, int64_t stride,
                  int64_t pad, void* dx) {
  const int64_t total = g.n * g.c * g.h * g.w;
  check_dtype(dispatch_float(dt, [&]<typename T>() {
                using C = typename Scalar<T>::C;
                if (total == 0) return;
                Y9_LAUNCH(avg_pool2d_bwd_kernel<T>, grid_for(total), kBlock, 0, stream_of(ctx),
                          static_cast<const T*>(dy), g, k, stride, pad, C(1) / static_cast<C>(k * k),
                          static_cast<T*>(dx), total);
              }),
              "avg_pool2d backward", dt);
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kUpsampleNearestForward, &upsample_fwd, engine::kFloating);
  b.add(kUpsampleNearestBackward, &upsample_bwd, engine::kFloating);
  b.add(kMaxPool2dForward, &max_pool_fwd, engine::kFloating);
  b.add(kMaxPool2dBackward, &max_pool_bwd, engine::kFloating);
  b.add(kAvgPool2dForward, &avg_pool_fwd, engine::kFloating);
  b.add(kAvgPool2dBackward, &avg_pool_bwd, engine::kFloating);
}

}  // namespace kernels::cuda
