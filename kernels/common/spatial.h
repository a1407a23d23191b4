// Kernel entries of the spatial ops on NCHW planes (PyTorch semantics): nearest upsampling by an
// integer factor, max and average 2-d pooling, forward and backward. Input strides are per dim
// so strided views need no copy; outputs and gradients are contiguous.
// Official use: nn.Upsample(None, 2, 'nearest'), SPPELAN's MaxPool2d(5, 1, 2), ADown's
// avg_pool2d(x, 2, 1, 0) and MaxPool2d(3, 2, 1) (yolov9 models/common.py).
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/hd.h"

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
/// dx (contiguous [N,C,H,W], overwritten) = scatter-add of dy at idx. kernel/stride/pad are the
/// forward's window: every idx lies in its output's window, so a backend may compute dx as a
/// gather over the outputs whose windows hold each input (CUDA); the CPU scatters and ignores them.
using MaxPool2dBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* dy,
                                     const int64_t* idx, const Plane2d& g, int64_t kernel, int64_t stride,
                                     int64_t pad, void* dx);
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

// --- window math shared by the CPU twins (kernels/cpu/spatial.cpp) and the CUDA kernels
// (kernels/cuda/spatial.cu) --------------------------------------------------------------------

/// First input row (or column) of the pooling window of output position o, clipped to 0:
/// max(o * stride - pad, 0).
Y9_HD int64_t pool_window_begin(int64_t o, int64_t stride, int64_t pad) {
  const int64_t v = o * stride - pad;
  return v > 0 ? v : 0;
}

/// One past the last input row (or column) of output position o's window, clipped to the input
/// size: min(o * stride - pad + k, size).
Y9_HD int64_t pool_window_end(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t size) {
  const int64_t v = o * stride - pad + k;
  return v < size ? v : size;
}

/// The output positions whose windows contain input position i (0 <= i < input size), as the
/// half-open range [*o0, *o1) clipped to [0, out): the inverse of pool_window_begin/end, used by
/// the gather formulations of the pooling backward kernels (each input gradient summed by one
/// thread, outputs in ascending order, as the CPU scatter adds them).
Y9_HD void pool_outputs_of(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t out, int64_t* o0,
                           int64_t* o1) {
  // o * stride - pad <= i  and  i < o * stride - pad + k.
  const int64_t a = i + pad - k;
  *o0 = a < 0 ? 0 : a / stride + 1;
  const int64_t last = (i + pad) / stride + 1;
  *o1 = last < out ? last : out;
}

/// The max-pooling update rule: v replaces the running maximum `best` when larger, or when NaN
/// (NaN propagates, as in PyTorch); ties keep the earlier position (first maximum in row-major
/// window order wins).
template <typename C>
Y9_HD bool max_pool_takes(C v, C best) {
  return v > best || v != v;
}

}  // namespace kernels
