// Kernel entries of the spatial ops on NCHW planes (PyTorch semantics): nearest upsampling by an
// integer factor, max and average 2-d pooling, forward and backward. Input strides are per dim
// so strided views need no copy; outputs and gradients are contiguous.
// Official use: nn.Upsample(None, 2, 'nearest'), SPPELAN's MaxPool2d(5, 1, 2), ADown's
// avg_pool2d(x, 2, 1, 0) and MaxPool2d(3, 2, 1) (yolov9 models/common.py).
#pragma once
#include <cstdint>

#include "engine/backend.h"

namespace kernels {

/// Geometry of a 2-d op on x [N, C, H, W] with strides xs[4] -> y [N, C, Ho, Wo] contiguous.
struct Plane2d {
  int64_t n, c, h, w;   ///< input sizes
  int64_t xs[4];        ///< input element strides (N, C, H, W)
  int64_t ho, wo;       ///< output spatial sizes
};

/// y[n,c,i,j] = x[n,c,i/s,j/s]; ho = h*s, wo = w*s.
using UpsampleNearestForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* x,
                                          const Plane2d& g, int64_t scale, void* y);
inline engine::KernelKey<UpsampleNearestForwardFn> kUpsampleNearestForward{"upsample_nearest_forward"};
/// dx[n,c,i,j] = sum_{a,b < s} dy[n,c,i*s+a,j*s+b]; dy contiguous [N,C,Ho,Wo], dx [N,C,H,W].
using UpsampleNearestBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* dy,
                                           const Plane2d& g, int64_t scale, void* dx);
inline engine::KernelKey<UpsampleNearestBackwardFn> kUpsampleNearestBackward{"upsample_nearest_backward"};

/// Max pooling with implicit -inf padding; the first maximum in row-major window order wins
/// (PyTorch). Writes the argmax (h*W + w within the input plane) to idx [N,C,Ho,Wo] (I64).
using MaxPool2dForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* x,
                                    const Plane2d& g, int64_t kernel, int64_t stride, int64_t pad, void* y,
                                    int64_t* idx);
inline engine::KernelKey<MaxPool2dForwardFn> kMaxPool2dForward{"max_pool2d_forward"};
/// dx (contiguous [N,C,H,W], overwritten) = scatter-add of dy at idx.
using MaxPool2dBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* dy,
                                     const int64_t* idx, const Plane2d& g, void* dx);
inline engine::KernelKey<MaxPool2dBackwardFn> kMaxPool2dBackward{"max_pool2d_backward"};

/// Average pooling, zero padding counted in the divisor (count_include_pad=true): every window
/// divides by k*k.
using AvgPool2dForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* x,
                                    const Plane2d& g, int64_t kernel, int64_t stride, int64_t pad, void* y);
inline engine::KernelKey<AvgPool2dForwardFn> kAvgPool2dForward{"avg_pool2d_forward"};
/// dx (contiguous [N,C,H,W], overwritten) from dy contiguous [N,C,Ho,Wo].
using AvgPool2dBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* dy,
                                     const Plane2d& g, int64_t kernel, int64_t stride, int64_t pad, void* dx);
inline engine::KernelKey<AvgPool2dBackwardFn> kAvgPool2dBackward{"avg_pool2d_backward"};

}  // namespace kernels
