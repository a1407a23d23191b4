// Task-Aligned Assigner and anchor helpers of the YOLOv9 loss (not differentiable: the outputs
// are training targets). Official utils/tal/assigner.py and utils/tal/anchor_generator.py.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "kernels/common/tal.h"

namespace ops {

/// TaskAlignedAssigner settings (one struct for the op and its kernels; defaults topk 10,
/// alpha 0.5, beta 6.0, eps 1e-9 as both official ComputeLoss classes construct it).
using TalConfig = kernels::TalConfig;

/// Assigner outputs for B images and A anchors.
struct TalResult {
  engine::Tensor target_labels;  ///< [B, A] I64 class of the assigned gt (gt 0's class for background)
  engine::Tensor target_bboxes;  ///< [B, A, 4] xyxy px of the assigned gt (pd dtype)
  engine::Tensor target_scores;  ///< [B, A, nc] soft one-hot (normalised alignment), 0 on background
  engine::Tensor fg_mask;        ///< [B, A] Bool, true on foreground anchors
  engine::Tensor target_gt_idx;  ///< [B, A] I64 index of the assigned gt in [0, M)
};

/// Task-Aligned Assigner, batched over images (no host loop in the caller; the CPU kernel runs
/// images and gts in parallel). Source: "TOOD: Task-aligned One-stage Object Detection"
/// (Feng et al., ICCV 2021) sec. 3.2; official TaskAlignedAssigner.forward, including its quirks
/// (CIoU as overlap, top-k that may pick zero-metric in-box anchors, argmax over all gts for
/// anchors claimed twice). Spec: shared/spec/loss.md section 3.
///   pd_scores [B, A, nc] sigmoid probabilities; pd_bboxes [B, A, 4] xyxy px;
///   anc_points [A, 2] px; gt_labels [B, M, 1] float class ids; gt_bboxes [B, M, 4] xyxy px;
///   mask_gt [B, M, 1] 1.0 for real gts, 0.0 for padding. All one dtype and device; runs on the
///   device's tal_assign kernel (CPU and CUDA: F32, F64).
/// Throws engine::ShapeError on shape/dtype/device mismatch or topk > A (NotSupportedError for a
/// dtype/device without a kernel).
/// Deterministic (bitwise) for a given input; top-k ties resolve like torch.topk on the CPU.
TalResult tal_assign(const engine::Tensor& pd_scores, const engine::Tensor& pd_bboxes,
                     const engine::Tensor& anc_points, const engine::Tensor& gt_labels,
                     const engine::Tensor& gt_bboxes, const engine::Tensor& mask_gt, const TalConfig& cfg);

/// Anchor grid of the head (official make_anchors(feats, strides, offset=0.5)).
struct Anchors {
  engine::Tensor points;   ///< [A, 2] (x + 0.5, y + 0.5) in grid units of each level, levels concatenated
  engine::Tensor strides;  ///< [A, 1] stride in px of each anchor's level
};
/// level_hw: (H_l, W_l) per level (y outer, x inner, levels in order); strides: px per level.
/// The grid is built on the host from shapes only and placed on `device` in `dtype`. The one
/// make_anchors of the engine: the loss and the detection head's eval decode both use it.
Anchors make_anchors(const std::vector<std::pair<int64_t, int64_t>>& level_hw, const std::vector<double>& strides,
                     engine::DType dtype = engine::DType::F32, double offset = 0.5,
                     engine::Device device = engine::Device::cpu());

/// Official ComputeLoss.preprocess: targets [N, 6] (image index, class, cx, cy, w, h normalised)
/// -> [B, M, 5] (class, x1, y1, x2, y2 in px; scaled by img_w/img_h), M = max objects per image
/// (0 when N == 0), rows per image in their original order, zero padding.
/// Reads `targets` on the host (the output shape depends on its contents; targets come from the
/// data loader on the host). Throws engine::ShapeError on a bad shape or an image index >= B.
engine::Tensor preprocess_targets(const engine::Tensor& targets, int64_t batch_size, double img_h, double img_w);

/// bbox2dist: anchor_points [A, 2], bbox [..., A, 4] xyxy -> [..., A, 4] (l, t, r, b) clamped to
/// [0, reg_max - 0.01] (official anchor_generator.py; the loss passes reg_max = 15). Not differentiable.
engine::Tensor bbox2dist(const engine::Tensor& anchor_points, const engine::Tensor& bbox, double reg_max);
/// dist2bbox (xywh=False): anchor_points [A, 2], distance [..., A, 4] (l, t, r, b) -> xyxy
/// (ax - l, ay - t, ax + r, ay + b). Not differentiable (the loss decodes inside its own kernel).
engine::Tensor dist2bbox(const engine::Tensor& distance, const engine::Tensor& anchor_points);

}  // namespace ops
