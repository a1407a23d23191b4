// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_, PyTorch 1.13), as
// train_dual.py applies it after unscaling: clip_grad_norm_(model.parameters(), max_norm=10.0),
// over a ParamStore's flat gradient buffer.
#pragma once
#include "apps/training/param_store.h"

namespace training {

/// Global L2 norm of the trainable parameters' gradients: per-parameter norms (one fused
/// sum_squares call over the segments, each sum in double in a fixed block order, rounded to FP32
/// like torch.norm), combined in double in registration order (model.parameters(), as the
/// official call) and rounded to FP32. Returned as a double holding the FP32 value.
/// Deterministic: bitwise reproducible for any thread count.
double grad_norm(const ParamStore& store);

/// Clips the store's gradients in place: coef = float(max_norm) / (total + 1e-6f); when coef < 1
/// (or NaN: a non-finite norm is not an error, error_if_nonfinite = False) the whole gradient
/// buffer is multiplied by coef in FP32 (one call). Returns total, the norm BEFORE clipping.
double clip_grad_norm_(const ParamStore& store, double max_norm);

}  // namespace training
