// The differentiable operators of the engine, one umbrella header. Every op validates its
// arguments (throwing engine::ShapeError that names the op and the shapes involved), calls the
// kernel entries of its input's device through the backend table (engine::kernel; a dtype or
// device without an entry throws engine::NotSupportedError, a ShapeError naming the entry, dtype
// and device), and records its backward node when autograd needs it. Tensors are NCHW, row-major;
// strided views are accepted everywhere. CPU dtypes: F32 and F64 (F64 is the reference path used by
// finite-difference checks); `yolov9 info --backends` lists every entry and dtype.
#pragma once
#include <vector>

#include "engine/tensor.h"
#include "kernels/common/batch_norm.h"
#include "ops/reduce.h"

namespace ops {

using engine::Tensor;

// --- elementwise (NumPy broadcasting; binary ops promote F16/BF16 mixed with another floating
// dtype to the wider one: F32, or F64 with F64; F32 with F64 stays an error) -------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& a, double s);
Tensor mul_scalar(const Tensor& a, double s);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor pow_scalar(const Tensor& a, double p);
/// clamp(x, lo, hi); gradient 1 inside [lo, hi], 0 outside (PyTorch convention at the bounds: 1).
Tensor clamp(const Tensor& x, double lo, double hi);

// --- activations ------------------------------------------------------------------------------
/// SiLU x*sigmoid(x) ("Sigmoid-Weighted Linear Units", Elfwing et al. 2018); official Conv act.
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
/// LeakyReLU: x > 0 ? x : negative_slope * x, elementwise, any shape and layout (torch
/// nn.LeakyReLU; "Rectifier Nonlinearities Improve Neural Network Acoustic Models", Maas et al.,
/// ICML 2013). Gradient dy where x > 0, else negative_slope * dy (PyTorch's choice at 0).
/// Dtypes: those the device's unary entries claim (CPU F32/F64; CUDA F32/F64/F16/BF16).
/// Throws engine::ShapeError on an undefined input, NotSupportedError on an unclaimed dtype.
/// Bitwise deterministic.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);

// --- shape ops --------------------------------------------------------------------------------
/// Concatenates along `dim` (all other sizes equal; official Concat uses dim 1). Mixed floating
/// dtypes with F16/BF16 pieces are promoted to the common one (F32 for F16 with F32), as the
/// binary ops.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
/// Splits `dim` into pieces of the given sizes (sum must equal the dim size); outputs are views.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
/// Splits `dim` into `chunks` equal pieces (PyTorch chunk: last may be smaller).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);

// --- spatial ----------------------------------------------------------------------------------
/// Nearest-neighbour upsampling by an integer factor: x [N,C,H,W] -> [N,C,H*s,W*s]. The three
/// spatial ops also take a blocked x (ops::is_blocked; CPU) and return a blocked result with the
/// same values, differentiable (a blocked gradient).
Tensor upsample_nearest(const Tensor& x, int64_t scale = 2);
/// Max pooling, x [N,C,H,W]; PyTorch semantics (implicit -inf padding, floor output size).
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);
/// Average pooling, x [N,C,H,W]; count_include_pad=true, floor output size (PyTorch defaults).
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);

// --- convolution and normalisation ------------------------------------------------------------
/// 2-d convolution. x [N,Cin,H,W], w [Cout,Cin/groups,kh,kw], bias [Cout] or undefined.
/// Output [N,Cout,Ho,Wo], Ho = (H + 2*pad_h - dil_h*(kh-1) - 1)/stride_h + 1. F32 through oneDNN
/// on the CPU (cuDNN on CUDA); F64 through a direct reference loop. Under an active
/// ops::AutocastGuard, CUDA operands are cast to the autocast dtype first (ops/autocast.h).
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, std::vector<int64_t> stride = {1, 1},
              std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
/// silu(conv2d(x, w, bias, ...)): the forward of a BN-folded Conv block (official models/common.py
/// Conv.forward_fuse). Same shapes, dtypes, checks and errors as conv2d. When no gradient is needed
/// and the device's backend has the fused entry (kernels/common/conv.h kConv2dBiasSiLUForward;
/// CPU F32/F64), one kernel writes the activated output (oneDNN post-op on the CPU; tested within
/// 2e-5 relative and absolute of the F64 two-op result in F32, conv rounding included, and 1e-14 in
/// F64); otherwise it is exactly silu(conv2d(...)), differentiable.
Tensor conv2d_silu(const Tensor& x, const Tensor& w, const Tensor& bias, std::vector<int64_t> stride = {1, 1},
                   std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> dilation = {1, 1},
                   int64_t groups = 1);

/// conv2d and conv2d_silu writing into `out` instead of a new tensor: inference only, for a
/// concat done in place (out a channel slice narrow(1, ...) of a batch-1 concat buffer, which is
/// contiguous). out: contiguous [N,Cout,Ho,Wo], x's dtype and device, not aliasing x, w or bias.
/// Same values as conv2d / conv2d_silu (the same kernels, or conv then silu then a copy where the
/// backend lacks the fused entry). Throws ShapeError for a bad out (shape, dtype, device, not
/// contiguous, overlapping a contiguous operand's bytes), Error when a gradient is needed (x, w or bias requires grad in grad mode: nothing
/// would be recorded), and conv2d's errors.
void conv2d_into(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                 std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
                 std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
void conv2d_silu_into(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                      std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
                      std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);

// --- blocked channel layout (CPU inference and training; issue 15 item 1) --------------------------
// oneDNN's nChw8c / nChw16c, held as a contiguous 5-d tensor [N, C / B, H, W, B] (channel
// c = cb * B + lane; C a multiple of B). The convolutions of a model read and write it in place,
// where a plain NCHW tensor costs a reorder of its input and its output on every call (oneDNN
// computes in a channel-innermost layout). A channel slice at a multiple of B is
// narrow(1, c0 / B, c / B): contiguous at batch 1, so concats and chunks of the ELAN blocks stay
// views. Elementwise ops (add, silu, ...) and concat / narrow along dim 1 apply unchanged to two
// blocked tensors of one block; batch_norm, batch_norm_silu, max_pool2d, avg_pool2d and
// upsample_nearest take them too. Everything here is differentiable, except the *_into writes;
// ShapeError for a non-CPU or non-F32 tensor where noted.

/// The channel block the CPU's convolutions prefer (16 with AVX-512, 8 with AVX2); 0 where the
/// blocked layout is not used (other CPUs, CUDA).
int64_t channel_block(engine::Device device);
/// Whether x is in the blocked layout: 5-d with a last dim of 8 or 16.
bool is_blocked(const Tensor& x);
/// The NCHW shape x stands for: x's shape, or [N, C, H, W] of a blocked x.
engine::Shape logical_shape(const Tensor& x);
/// x [N, C, H, W] (any strides) -> contiguous [N, C / block, H, W, block]. Exact (a copy);
/// differentiable (the gradient converts back). Throws ShapeError when x is not 4-d, block is not 8
/// or 16, or C is not a multiple of block.
Tensor to_blocked(const Tensor& x, int64_t block);
/// Blocked x -> contiguous [N, C, H, W] (a plain x is returned as is). Exact (a copy);
/// differentiable.
Tensor from_blocked(const Tensor& x);
/// silu(conv2d(...)) when `silu`, else conv2d(...), with x plain [N, Cin, H, W] or blocked, and the
/// output blocked by `out_block` (8 or 16, dividing Cout) or plain (0). CPU F32 (kernels/common/conv.h:
/// the CPU entries with Conv2dShape::src_block / dst_block). Differentiable: when a gradient is
/// needed it runs the convolution, records its backward in the same layouts (a blocked x gets a
/// blocked gradient), then SiLU as its own op; the fused SiLU is for inference.
/// Values: those of the same convolution on plain tensors up to oneDNN's float rounding (a blocked
/// layout may select another implementation). `winograd`: a 3x3 stride-1 dense convolution,
/// blocked in and out, may use the Winograd algorithm (kernels::Conv2dShape::winograd;
/// F(4x4, 3x3) rounds to about 1e-5 of the output scale where the direct one is exact to 1e-7):
/// in inference with SiLU only; in training in the forward and both backward directions, in F32
/// also under BF16 autocast (kernels/cpu/conv.cpp use_winograd).
/// Throws conv2d's errors, ShapeError (device, dtype, bad out_block).
Tensor conv2d_blocked(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
                      const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, int64_t groups,
                      bool silu, int64_t out_block, bool winograd = false);
/// conv2d_blocked into `out`: contiguous, plain [N, Cout, Ho, Wo] or blocked (its block is the
/// output's), not overlapping a contiguous operand; no gradient. Throws as conv2d_blocked,
/// ShapeError for a bad out, Error when a gradient is needed.
void conv2d_blocked_into(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                         const std::vector<int64_t>& dilation, int64_t groups, bool silu, bool winograd = false);

/// BatchNorm2d. x [N,C,H,W]; weight, bias, running_mean, running_var [C].
/// training: normalises with the batch mean and biased batch variance, and updates the running
/// stats in place: r = (1-momentum)*r + momentum*stat, with the unbiased variance (n/(n-1)) for
/// running_var (PyTorch convention; official YOLOv9 uses eps=1e-3, momentum=0.03).
/// eval: normalises with the running stats. Differentiable in x, weight and bias.
/// F16/BF16 x with F32 parameters (autocast): normalised in FP32, the output in x's dtype.
/// `sync` (training; kernels/common/batch_norm.h): synchronised BatchNorm over every rank's batch
/// (official SyncBatchNorm); it must outlive the backward. nullptr: this batch only.
/// Blocked x (is_blocked: [N, C / B, H, W, B], CPU; C = x.size(1) * B): normalised in that layout
/// by the CPU's blocked kernels (F32/F64; the values of the plain layout up to the order of the
/// sums, deterministic for any thread count); y and x's gradient have x's blocked shape. With
/// `sync` in training it is computed on the plain layout through from_blocked / to_blocked. Any
/// other 5-d CPU x with a last dim of 8 or 16 is taken as blocked; off the CPU, x is [N, C, ...].
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps,
                  const kernels::BatchNormSync* sync = nullptr);
/// silu(batch_norm(...)) with the same arguments and errors: the Conv block's BN + SiLU (official
/// models/common.py Conv: act(bn(conv(x)))). Where x's backend has the fused entries
/// (kernels/common/batch_norm.h: CPU and CUDA, F32/F64), there is no `sync` and no F16/BF16
/// (autocast), and each (sample, channel) run has at least 64 elements (8 x 8; smaller maps lose to
/// the CPU's per-run overhead), one forward pass writes silu(z) without storing z (the backward
/// recomputes z from x), with the bits of the two-op form on that backend: the same outputs,
/// gradients and running stats (for an incoming gradient with contiguous rows, as inside the model:
/// the CPU's two-op SiLU backward rounds strided rows with the scalar e^x), one activation less
/// kept per block and fewer passes over it. Otherwise it is the two ops. A blocked x (as
/// batch_norm; its runs are H x W) stays blocked, fused or not, with the same bits as the two ops
/// on it.
Tensor batch_norm_silu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps,
                       const kernels::BatchNormSync* sync = nullptr);

// --- linear algebra and softmax ---------------------------------------------------------------
/// Matrix product: a [..., M, K] x b [..., K, N] -> [..., M, N] (batch dims broadcast); BLAS GEMM.
/// Under an active ops::AutocastGuard, CUDA operands are cast to the autocast dtype first.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// --- loss building blocks ---------------------------------------------------------------------
/// Elementwise binary cross-entropy with logits, no reduction (torch BCEWithLogitsLoss
/// reduction='none'): max(x,0) - x*t + log(1 + exp(-|x|)). Differentiable in x (and t).
Tensor bce_with_logits(const Tensor& x, const Tensor& target);

}  // namespace ops

namespace engine {
// Operator sugar for the elementwise ops.
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
inline Tensor operator-(const Tensor& a) { return ops::neg(a); }
}  // namespace engine
