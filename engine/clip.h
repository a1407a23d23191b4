// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_, PyTorch 1.13), as
// train_dual.py applies it after unscaling: clip_grad_norm_(model.parameters(), max_norm=10.0).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace engine {

/// Clips the gradients of `params` in place. Parameters with an undefined grad are ignored.
/// total = sqrt(sum_p ||g_p||^2) (per-tensor norms rounded to FP32 like torch.norm, combined in
/// double and rounded to FP32); coef = float(max_norm) / (total + 1e-6f); when coef < 1 every
/// grad is multiplied by coef (FP32). Returns total (the norm BEFORE clipping), as a double
/// holding the FP32 value; 0 when no grad is defined. Non-finite norms are not an error
/// (error_if_nonfinite = False): the grads then become NaN, as in PyTorch.
/// Grads must be F32 CPU contiguous (engine::Error otherwise).
/// Determinism: bitwise reproducible (fixed-order block sums).
double clip_grad_norm_(const std::vector<std::pair<std::string, Tensor>>& params, double max_norm);
/// Same over plain tensor handles.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

/// Global L2 norm of the defined grads of `params` (same arithmetic as clip_grad_norm_), no change.
double grad_norm(const std::vector<Tensor>& params);

}  // namespace engine
