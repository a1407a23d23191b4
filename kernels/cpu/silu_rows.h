// The CPU's F32 SiLU over contiguous elements, shared by the elementwise entries
// (kernels/cpu/elementwise.cpp) and the fused BatchNorm2d + SiLU (kernels/cpu/batch_norm.cpp), so
// that both round alike: a Cephes e^x over 8-float vectors (AVX2 + FMA when the CPU has them,
// picked at run time), each element's result independent of its position.
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// y[i] = x[i] * sigmoid(x[i]) for i < n (x and y may be the same buffer).
void silu_rows_f32(const float* x, float* y, int64_t n);
/// dx[i] = dy[i] * s * (1 + x[i] * (1 - s)), s = sigmoid(x[i]), for i < n: SiLU's backward from its
/// input x.
void silu_backward_rows_f32(const float* x, const float* dy, float* dx, int64_t n);

}  // namespace kernels::cpu
