// Automatic mixed precision for the forward pass (torch.autocast / torch.cuda.amp.autocast): a
// thread-local switch that makes the compute-heavy ops (conv2d, matmul) run in FP16 or BF16 on
// CUDA tensors, with FP32 accumulation in cuDNN/cuBLAS, while the parameters stay FP32 masters.
#pragma once
#include "engine/dtype.h"
#include "engine/tensor.h"

namespace ops {

/// Scoped autocast (torch.autocast(device_type="cuda", dtype=dt, enabled=enabled)): while alive,
/// ops::conv2d and ops::matmul whose operands are on a CUDA device cast their floating operands
/// (F32, F16, BF16; F64 is left alone, as PyTorch does) to `dt` with the differentiable
/// Tensor::to(DType) and compute in `dt`. The backward of the cast converts the gradient back, so
/// FP32 master weights receive FP32 gradients. Operands already in `dt` are not copied. CPU
/// tensors are never cast (official train_dual.py runs autocast on CUDA only); under BF16 autocast
/// their F32 convolutions compute in BF16 on a CPU with native BF16 (cpu_bf16_conv). Every other op
/// follows its input's dtype (BatchNorm with F16/BF16 x and FP32 parameters normalises in FP32,
/// ops/batch_norm.cpp; binary elementwise ops promote mixed floating dtypes to the wider one).
/// `enabled = false` turns autocast off inside the scope (torch's autocast(enabled=False), e.g.
/// for a loss that must run in FP32). The state is per thread and guards nest (the destructor
/// restores the previous state).
/// dt: F16 or BF16 (throws engine::ConfigError otherwise, when enabled).
/// Source: "Mixed Precision Training" (Micikevicius et al., ICLR 2018); official YOLOv9
/// train_dual.py `with torch.cuda.amp.autocast(amp)` around model(imgs) and the loss.
/// Determinism: casting is exact round-to-nearest-even (engine/half.h); results are as
/// deterministic as the ops run in `dt`.
class AutocastGuard {
 public:
  explicit AutocastGuard(engine::DType dt, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  engine::DType prev_dtype_;
};

/// Whether BF16 autocast computes the CPU convolutions of device `device` in BF16: a CPU whose
/// oneDNN ISA has native BF16 (AVX512_BF16 or AMX; kernels::kConv2dBf16Math). Elsewhere CPU
/// convolutions stay F32 under autocast.
bool cpu_bf16_convolutions(engine::Device device);

/// Whether a convolution of operand x runs in BF16 math on the CPU now: BF16 autocast is active on
/// this thread, x is an F32 CPU tensor and the CPU has native BF16 (cpu_bf16_convolutions). Such a
/// convolution keeps its F32 tensors (no cast, unlike CUDA): the kernel rounds its inputs to BF16
/// and accumulates in F32 (kernels::Conv2dShape::bf16), forward and backward. Extension: official
/// train_dual.py trains on the CPU in FP32 (AMP is CUDA-only there); here `--amp bf16` on such a
/// CPU opts in (PyTorch's own CPU autocast, torch.autocast("cpu", torch.bfloat16), also runs
/// convolutions in BF16).
bool cpu_bf16_conv(const engine::Tensor& x);

/// Whether autocast is active on this thread (an enabled AutocastGuard is the innermost one).
bool autocast_enabled();
/// The dtype of the innermost enabled AutocastGuard (F16 or BF16); F32 when autocast is off.
engine::DType autocast_dtype();

/// The operand `t` as autocast computes with it: `t.to(autocast_dtype())` when autocast is active,
/// `t` is defined, on a CUDA device and of dtype F32, F16 or BF16 other than the autocast dtype;
/// otherwise `t` itself (undefined stays undefined). Differentiable (Tensor::to).
engine::Tensor autocast_operand(const engine::Tensor& t);

}  // namespace ops
