// Distribution Focal Loss over positive anchors with a hand-written backward
// (official utils/loss_tal.py BboxLoss._df_loss).
#pragma once
#include "engine/tensor.h"

namespace ops {

/// DFL: pred_dist [P, 4, nbins] logits (one distribution per side l, t, r, b), target [P, 4] in
/// grid units within [0, nbins - 1) (the loss clamps to nbins - 1 - 0.01 = 14.99 for nbins 16)
/// -> [P, 1] = mean over the 4 sides of ce(left) * (left + 1 - y) + ce(left + 1) * (y - left),
/// left = trunc(y), ce = cross-entropy of the side's logits. Differentiable in pred_dist only
/// (targets are constants). Both on one device, one dtype (the device's dfl entries: CPU and CUDA F32, F64).
/// Source: "Generalized Focal Loss" (Li et al., NeurIPS 2020) eq. 6. Throws engine::ShapeError
/// on shape/dtype/device mismatch. Deterministic.
engine::Tensor dfl(const engine::Tensor& pred_dist, const engine::Tensor& target);

}  // namespace ops
