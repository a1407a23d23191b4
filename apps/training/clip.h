// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_, PyTorch 1.13), as
// train_dual.py applies it after unscaling: clip_grad_norm_(model.parameters(), max_norm=10.0),
// over a ParamStore's flat gradient buffer.
#pragma once
#include "apps/training/param_store.h"

namespace training {

/// Global L2 norm of the trainable parameters' gradients (store.grads().flat, F32): per-parameter
/// norms (one fused sum_squares call over the segments, each sum in double in a fixed block order,
/// rounded to FP32 like torch.norm), combined in double in registration order (model.parameters(),
/// as the official call) and rounded to FP32 (kernels/common/optim.h global_norm_from_sums), all
/// on the gradients' device. Returns a 0-d F32 tensor on that device (0 when nothing is
/// trainable; the CPU when the store has no gradient buffer): nothing is read to the host, so on
/// CUDA the call only queues work. Deterministic: bitwise reproducible for any thread count, and
/// equal on CPU and CUDA.
Tensor grad_norm_async(const ParamStore& store);

/// grad_norm_async read to the host: the FP32 norm as a double (synchronises with the device).
double grad_norm(const ParamStore& store);

/// Clips the store's gradients in place on their device: coef = float(max_norm) / (total + 1e-6f);
/// when coef < 1 (or NaN: a non-finite norm is not an error, error_if_nonfinite = False) the whole
/// gradient buffer is multiplied by coef in FP32 (one kernel, which derives coef from the norm on
/// the device). Returns total, the norm BEFORE clipping, as grad_norm_async does (0-d F32 on the
/// gradients' device, not read to the host).
Tensor clip_grad_norm_async(const ParamStore& store, double max_norm);

/// clip_grad_norm_async with the norm read to the host (synchronises with the device): total, the
/// norm before clipping, as a double holding the FP32 value.
double clip_grad_norm_(const ParamStore& store, double max_norm);

}  // namespace training
