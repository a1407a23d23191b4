// CUDA entries of CIoU and DFL (kernels/common/box_loss.h): one thread per box pair / per
// prediction, over the same Y9_HD element math as the CPU twin (kernels/cpu/box_loss.cpp), so the
// results equal the CPU's up to the device's libm (atan, exp, log). Sources: official
// utils/metrics.py bbox_iou (CIoU), utils/loss_tal.py BboxLoss._df_loss (DFL).
#include <cuda_runtime.h>

#include "engine/error.h"
#include "kernels/common/box_loss.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

namespace {

template <typename T>
__global__ void ciou_forward_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n,
                                    T eps) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = ciou_fwd<T>(a + 4 * i, b + 4 * i, eps);
}

template <typename T>
__global__ void ciou_backward_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ gout,
                                     T* __restrict__ ga, T* __restrict__ gb, int64_t n, T eps) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T la[4] = {0, 0, 0, 0}, lb[4] = {0, 0, 0, 0};
    ciou_bwd<T>(a + 4 * i, b + 4 * i, eps, gout[i], la, lb);
    for (int k = 0; k < 4; ++k) {
      if (ga) ga[4 * i + k] = la[k];
      if (gb) gb[4 * i + k] = lb[k];
    }
  }
}

template <typename T>
__global__ void dfl_forward_kernel(const T* __restrict__ logits, const T* __restrict__ target, T* __restrict__ out,
                                   int64_t P, int nbins) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < P; p += int64_t(gridDim.x) * blockDim.x) {
    T s = T(0);
    for (int k = 0; k < 4; ++k) s += dfl_side_fwd<T>(logits + (p * 4 + k) * nbins, nbins, target[p * 4 + k]);
    out[p] = s / T(4);
  }
}

template <typename T>
__global__ void dfl_backward_kernel(const T* __restrict__ logits, const T* __restrict__ target,
                                    const T* __restrict__ gout, T* __restrict__ glogits, int64_t P, int nbins) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < P; p += int64_t(gridDim.x) * blockDim.x) {
    for (int k = 0; k < 4; ++k) {
      T* g = glogits + (p * 4 + k) * nbins;
      for (int j = 0; j < nbins; ++j) g[j] = T(0);
      dfl_side_bwd<T>(logits + (p * 4 + k) * nbins, nbins, target[p * 4 + k], gout[p] / T(4), g);
    }
  }
}

// F32 / F64 (the CPU twin's set); the element math computes in the storage type.
template <typename F>
void float_or_double_cuda(engine::DType dt, const char* what, F&& f) {
  if (dt == engine::DType::F32) f.template operator()<float>();
  else if (dt == engine::DType::F64) f.template operator()<double>();
  else Y9_CHECK_SHAPE(false, what, ": dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64)");
}

using engine::DeviceContext;
using engine::DType;

void ciou_fwd_entry(DeviceContext& ctx, DType dt, const void* a, const void* b, void* out, int64_t n, double eps) {
  if (n == 0) return;
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  float_or_double_cuda(dt, "ciou_forward", [&]<typename T>() {
    Y9_LAUNCH(ciou_forward_kernel<T>, grid_for(n), kBlock, 0, stream, static_cast<const T*>(a),
              static_cast<const T*>(b), static_cast<T*>(out), n, static_cast<T>(eps));
  });
}

void ciou_bwd_entry(DeviceContext& ctx, DType dt, const void* a, const void* b, const void* gout, void* ga, void* gb,
                    int64_t n, double eps) {
  if (n == 0) return;
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  float_or_double_cuda(dt, "ciou_backward", [&]<typename T>() {
    Y9_LAUNCH(ciou_backward_kernel<T>, grid_for(n), kBlock, 0, stream, static_cast<const T*>(a),
              static_cast<const T*>(b), static_cast<const T*>(gout), static_cast<T*>(ga), static_cast<T*>(gb), n,
              static_cast<T>(eps));
  });
}

void dfl_fwd_entry(DeviceContext& ctx, DType dt, const void* logits, const void* target, void* out, int64_t P,
                   int nbins) {
  if (P == 0) return;
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  float_or_double_cuda(dt, "dfl_forward", [&]<typename T>() {
    Y9_LAUNCH(dfl_forward_kernel<T>, grid_for(P), kBlock, 0, stream, static_cast<const T*>(logits),
              static_cast<const T*>(target), static_cast<T*>(out), P, nbins);
  });
}

void dfl_bwd_entry(DeviceContext& ctx, DType dt, const void* logits, const void* target, const void* gout,
                   void* glogits, int64_t P, int nbins) {
  if (P == 0) return;
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  float_or_double_cuda(dt, "dfl_backward", [&]<typename T>() {
    Y9_LAUNCH(dfl_backward_kernel<T>, grid_for(P), kBlock, 0, stream, static_cast<const T*>(logits),
              static_cast<const T*>(target), static_cast<const T*>(gout), static_cast<T*>(glogits), P, nbins);
  });
}

}  // namespace

/// CUDA CIoU forward/backward ([n, 4] xyxy pairs) and DFL forward/backward (logits [P, 4, nbins],
/// targets [P, 4]), F32 and F64, on the context's compute stream; no host reads or syncs.
Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kCiouForward, &ciou_fwd_entry, engine::kF32F64);
  b.add(kCiouBackward, &ciou_bwd_entry, engine::kF32F64);
  b.add(kDflForward, &dfl_fwd_entry, engine::kF32F64);
  b.add(kDflBackward, &dfl_bwd_entry, engine::kF32F64);
}

}  // namespace kernels::cuda
