// CUDA elementwise launchers: broadcasting binary ops, SiLU/sigmoid/ReLU forward and backward,
// BCE-with-logits forward and backward. Element math is kernels/common/elementwise.h (the same
// functions the CPU twins use). Include only with Y9_WITH_CUDA (no nvcc needed).
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "kernels/common/strided.h"
#include "kernels/cuda/stream.h"

namespace kernels::cuda {

enum class BinaryOp { Add, Sub, Mul, Div };

// Common contract of every launcher below:
//  - every operand has the same dtype `dtype`: F32, F16, BF16 (computed in float) or F64
//    (computed in double); any other dtype throws engine::ShapeError;
//  - the output layout gives the iteration shape; each input layout has the same sizes with
//    stride 0 on broadcast dims (ops::layout_for builds these); any strides are allowed;
//  - pointers point at element [0,...,0] in device memory of the stream's device; the output
//    must not overlap an input except exactly (same pointer and layout: in-place is fine);
//  - asynchronous on `stream`; throws engine::CudaError on a launch failure;
//  - bitwise deterministic (pure elementwise, no reductions).

/// out = a (op) b, with broadcasting. Div follows IEEE (x/0 = ±inf, 0/0 = NaN).
void binary_forward_cuda(BinaryOp op, void* out, engine::DType dtype, const StridedLayout& out_layout, const void* a,
                         const StridedLayout& a_layout, const void* b, const StridedLayout& b_layout,
                         cudaStream_t stream);

/// y = x * sigmoid(x) (SiLU: "Sigmoid-Weighted Linear Units", Elfwing et al. 2018; official Conv act).
void silu_forward_cuda(void* y, engine::DType dtype, const StridedLayout& y_layout, const void* x,
                       const StridedLayout& x_layout, cudaStream_t stream);
/// dx = dy * s(x) * (1 + x * (1 - s(x))), from the forward INPUT x.
void silu_backward_cuda(void* dx, engine::DType dtype, const StridedLayout& dx_layout, const void* x,
                        const StridedLayout& x_layout, const void* dy, const StridedLayout& dy_layout,
                        cudaStream_t stream);
/// y = 1 / (1 + exp(-x)).
void sigmoid_forward_cuda(void* y, engine::DType dtype, const StridedLayout& y_layout, const void* x,
                          const StridedLayout& x_layout, cudaStream_t stream);
/// dx = dy * y * (1 - y), from the forward OUTPUT y.
void sigmoid_backward_cuda(void* dx, engine::DType dtype, const StridedLayout& dx_layout, const void* y,
                           const StridedLayout& y_layout, const void* dy, const StridedLayout& dy_layout,
                           cudaStream_t stream);
/// y = max(x, 0).
void relu_forward_cuda(void* y, engine::DType dtype, const StridedLayout& y_layout, const void* x,
                       const StridedLayout& x_layout, cudaStream_t stream);
/// dx = x > 0 ? dy : 0, from the forward INPUT x.
void relu_backward_cuda(void* dx, engine::DType dtype, const StridedLayout& dx_layout, const void* x,
                        const StridedLayout& x_layout, const void* dy, const StridedLayout& dy_layout,
                        cudaStream_t stream);
/// Elementwise (unreduced) loss = max(x,0) - x*t + log1p(exp(-|x|)), numerically stable form of
/// PyTorch's BCEWithLogitsLoss(reduction='none'), used by the official ComputeLoss (utils/loss_tal*.py).
void bce_with_logits_forward_cuda(void* loss, engine::DType dtype, const StridedLayout& loss_layout, const void* x,
                                  const StridedLayout& x_layout, const void* t, const StridedLayout& t_layout,
                                  cudaStream_t stream);
/// dx = dy * (sigmoid(x) - t).
void bce_with_logits_backward_cuda(void* dx, engine::DType dtype, const StridedLayout& dx_layout, const void* x,
                                   const StridedLayout& x_layout, const void* t, const StridedLayout& t_layout,
                                   const void* dy, const StridedLayout& dy_layout, cudaStream_t stream);

}  // namespace kernels::cuda
