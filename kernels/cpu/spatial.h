// CPU twins of the spatial ops on NCHW planes: nearest upsampling by an integer factor, max and
// average 2-d pooling (PyTorch semantics), forward and backward. Input strides are per dim
// (N, C, H, W) in elements so strided views need no copy; outputs are contiguous.
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// Geometry of a 2-d op on x [N, C, H, W] with strides xs[4] -> y [N, C, Ho, Wo] contiguous.
struct Plane2d {
  int64_t n, c, h, w;   ///< input sizes
  int64_t xs[4];        ///< input element strides (N, C, H, W)
  int64_t ho, wo;       ///< output spatial sizes
};

/// y[n,c,i,j] = x[n,c,i/s,j/s]; ho = h*s, wo = w*s.
template <typename T>
void upsample_nearest_forward_cpu(const T* x, const Plane2d& g, int64_t s, T* y);
/// dx[n,c,i,j] = sum_{a,b < s} dy[n,c,i*s+a,j*s+b]; dy contiguous [N,C,Ho,Wo], dx contiguous [N,C,H,W].
template <typename T>
void upsample_nearest_backward_cpu(const T* dy, const Plane2d& g, int64_t s, T* dx);

/// Max pooling with implicit -inf padding; the first maximum in row-major window order wins
/// (PyTorch). Writes argmax (h*W + w within the input plane) to `idx` [N,C,Ho,Wo].
template <typename T>
void max_pool2d_forward_cpu(const T* x, const Plane2d& g, int64_t k, int64_t stride, int64_t pad, T* y,
                            int64_t* idx);
/// dx (contiguous [N,C,H,W], overwritten) = scatter-add of dy at idx. Threaded over planes.
template <typename T>
void max_pool2d_backward_cpu(const T* dy, const int64_t* idx, const Plane2d& g, T* dx);

/// Average pooling, zero padding counted in the divisor (count_include_pad=true): every window
/// divides by k*k (floor output size keeps windows inside the padded input).
template <typename T>
void avg_pool2d_forward_cpu(const T* x, const Plane2d& g, int64_t k, int64_t stride, int64_t pad, T* y);
/// dx (contiguous [N,C,H,W], overwritten) from dy contiguous [N,C,Ho,Wo].
template <typename T>
void avg_pool2d_backward_cpu(const T* dy, const Plane2d& g, int64_t k, int64_t stride, int64_t pad, T* dx);

}  // namespace kernels::cpu
