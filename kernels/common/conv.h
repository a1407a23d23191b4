// Kernel entries of 2-d convolution (forward, backward data, backward weights+bias). Buffers are
// contiguous NCHW / OIHW. CPU: F32 through oneDNN, F64 through direct reference loops; CUDA:
// cuDNN (the CUDA training issue).
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/storage.h"

namespace kernels {

/// Geometry of one convolution. x [n, c_in, h, w], weight [c_out, c_in/groups, kh, kw],
/// y [n, c_out, h_out, w_out]; dilation in PyTorch convention (1 = dense kernel).
/// src_block / dst_block: the layout of x / y, 0 for plain NCHW, else the channel block B of the
/// blocked layout (kernels/common/blocked.h: [n, c / B, h, w, B] contiguous, c a multiple of B).
/// Blocked operands are a CPU F32 feature: the CPU backend's F32 entries take them, forward and
/// backward (ops::conv2d_blocked, inference and training); F64 and the other backends require 0.
struct Conv2dShape {
  int64_t n, c_in, h, w;
  int64_t c_out, kh, kw;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
  int64_t h_out, w_out;
  int64_t src_block = 0, dst_block = 0;
  /// 1: a blocked 3x3 stride-1 dense convolution (src and dst blocked) may use the Winograd
  /// algorithm (oneDNN's F(4x4, 3x3) / F(2x2, 3x3) on AVX-512: about half the time of the direct
  /// one on YOLOv9's 3x3 layers, with a larger float rounding error; graph::set_cpu_winograd),
  /// where the CPU has it: in inference with SiLU (the fused entry), in training in the forward and
  /// both backward directions, in F32 even under `bf16` (not on AMX CPUs; where oneDNN has no F32
  /// Winograd for the geometry, `bf16` math stays); 0: direct only. CPU only, like the blocks.
  int64_t winograd = 0;
  /// 1: BF16 convolution math on F32 operands (CPU autocast to BF16, ops/autocast.h): the CPU's F32
  /// entries round their inputs (x and w forward; dy and w backward data; x and dy backward
  /// weights) to BF16, round to nearest even, and multiply-accumulate in F32 (oneDNN's BF16
  /// kernels), writing F32 outputs and gradients; the bias gradient sums the BF16-rounded dy (as
  /// PyTorch's CPU autocast). About twice the F32 throughput on a CPU with native BF16 (AVX512_BF16
  /// or AMX, kConv2dBf16Math); where oneDNN has only its reference kernel for a geometry in BF16
  /// (in the fixed blocked layouts and in the layouts it picks) the convolution stays F32 (block 8,
  /// grouped convolutions with few channels per group). The training convolutions that run
  /// Winograd (`winograd` above) compute in F32 instead. Other backends and dtypes ignore it.
  int64_t bf16 = 0;
  /// 1 (CPU, with bf16 and src_block): the x given to the backward weights is the BF16 copy the
  /// forward kept (kConv2dForwardKeepInput): [n, c_in / src_block, h, w, src_block] BF16.
  int64_t x_bf16 = 0;
};

/// y = conv(x, w) + bias (bias may be null).
/// `w_derived`: the DerivedData of w's storage when that storage is frozen (its bytes constant,
/// engine::Storage::freeze: the folded weights of a fused model, the trainer's flat parameters
/// between optimizer steps), else null. With it the kernel may keep w in its primitive's layout
/// there (CPU F32: oneDNN's weight reorder runs once per weight and generation, not once per call;
/// other backends and dtypes ignore it).
using Conv2dForwardFn = void (*)(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dtype,
                                 const void* x, const void* w, const void* bias, void* y,
                                 engine::DerivedData* w_derived);
inline engine::KernelKey<Conv2dForwardFn> kConv2dForward{"conv2d_forward"};

/// y = silu(conv(x, w) + bias) (bias may be null): the inference form of a BN-folded Conv block
/// (graph::Conv after fuse(); official models/common.py Conv.forward_fuse), one pass over y. No
/// backward: ops::conv2d_silu uses it only when no gradient is needed. CPU: oneDNN's convolution
/// with a swish post-op (F32), reference loops (F64); backends without it get conv then silu.
/// `w_derived`: as for conv2d_forward.
using Conv2dBiasSiLUForwardFn = void (*)(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dtype,
                                         const void* x, const void* w, const void* bias, void* y,
                                         engine::DerivedData* w_derived);
inline engine::KernelKey<Conv2dBiasSiLUForwardFn> kConv2dBiasSiLUForward{"conv2d_bias_silu_forward"};

/// dx = conv_transpose(dy, w) (overwrites dx). `w_derived`: as for conv2d_forward (the backward
/// primitive's weight layout is kept beside the forward one).
using Conv2dBackwardDataFn = void (*)(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dtype,
                                      const void* dy, const void* w, void* dx, engine::DerivedData* w_derived);
inline engine::KernelKey<Conv2dBackwardDataFn> kConv2dBackwardData{"conv2d_backward_data"};

/// dw = sum over batch and pixels of x * dy (overwrites dw); dbias = sum of dy when non-null.
using Conv2dBackwardWeightsFn = void (*)(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dtype,
                                         const void* x, const void* dy, void* dw, void* dbias);
inline engine::KernelKey<Conv2dBackwardWeightsFn> kConv2dBackwardWeights{"conv2d_backward_weights"};

/// kConv2dForward that may also keep x for the backward weights: where the convolution converts a
/// blocked x to BF16 (Conv2dShape::bf16 and src_block), the conversion is written to `x_kept`
/// (room for numel(x) BF16 values: x's blocked layout in BF16) and true returned; the backward
/// weights then takes it with Conv2dShape::x_bf16 = 1 instead of converting x again. Returns
/// false, x_kept untouched, otherwise. Optional (CPU): ops::conv2d uses kConv2dForward without it.
using Conv2dForwardKeepInputFn = bool (*)(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dtype,
                                          const void* x, const void* w, const void* bias, void* y,
                                          engine::DerivedData* w_derived, void* x_kept);
inline engine::KernelKey<Conv2dForwardKeepInputFn> kConv2dForwardKeepInput{"conv2d_forward_keep_input"};

/// Both backward directions of one convolution in one call: dx = conv_transpose(dy, w) when dx is
/// not null (as kConv2dBackwardData, `w_derived` likewise), dw and dbias (may be null) as
/// kConv2dBackwardWeights when dw is not null. The backend may prepare dy once for both (the CPU
/// converts it to BF16 once under Conv2dShape::bf16, not once per direction). Optional: ops::conv2d
/// falls back to the two entries where a backend lacks it.
using Conv2dBackwardFn = void (*)(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dtype,
                                  const void* x, const void* dy, const void* w, void* dx, void* dw, void* dbias,
                                  engine::DerivedData* w_derived);
inline engine::KernelKey<Conv2dBackwardFn> kConv2dBackward{"conv2d_backward"};

/// Whether the backend runs Conv2dShape::bf16 convolutions at BF16 speed: CPU, oneDNN's
/// effective ISA has native BF16 (avx512_core_bf16 or AMX; an AMD EPYC Zen 4 or a recent Xeon).
/// Registered for F32 by the CPU backend only.
using Conv2dBf16MathFn = bool (*)(engine::DeviceContext& ctx);
inline engine::KernelKey<Conv2dBf16MathFn> kConv2dBf16Math{"conv2d_bf16_math"};

}  // namespace kernels
