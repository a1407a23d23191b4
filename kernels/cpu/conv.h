// CPU 2-d convolution kernels: F32 through oneDNN (forward, backward data, backward weights+bias)
// and a direct reference loop (any float type; used for F64 finite-difference checks and as the
// ground truth the oneDNN path is tested against). Buffers are contiguous NCHW / OIHW.
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// Geometry of one convolution. x [n, c_in, h, w], weight [c_out, c_in/groups, kh, kw],
/// y [n, c_out, h_out, w_out]; dilation in PyTorch convention (1 = dense kernel).
struct Conv2dShape {
  int64_t n, c_in, h, w;
  int64_t c_out, kh, kw;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
  int64_t h_out, w_out;
};

// --- oneDNN (F32) -----------------------------------------------------------------------------
/// y = conv(x, w) + bias (bias may be null). Throws engine::Error on a oneDNN failure.
void conv2d_forward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
/// dx = conv_transpose(dy, w) (overwrites dx).
void conv2d_backward_data_onednn(const Conv2dShape& s, const float* dy, const float* w, float* dx);
/// dw = sum over batch/pixels of x * dy (overwrites dw); dbias = sum of dy (when non-null).
void conv2d_backward_weights_onednn(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                    float* dbias);

// --- direct reference loops (T = float or double) ---------------------------------------------
template <typename T>
void conv2d_forward_ref(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y);
template <typename T>
void conv2d_backward_data_ref(const Conv2dShape& s, const T* dy, const T* w, T* dx);
/// dbias may be null.
template <typename T>
void conv2d_backward_weights_ref(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias);

}  // namespace kernels::cpu
