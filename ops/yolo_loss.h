// The YOLOv9 training loss (TAL assignment + BCE + CIoU + DFL) for single-branch (gelan,
// official utils/loss_tal.py) and dual-branch (yolov9 PGI, utils/loss_tal_dual.py) heads, as one
// differentiable op with a fused hand-written backward. Spec: shared/spec/loss.md.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/tensor.h"
#include "ops/tal.h"

namespace ops {

/// Loss settings. Gains are hard-coded in the official classes (box 7.5, cls 0.5, dfl 1.5); the
/// branch weights are {1} for loss_tal.py and {0.25, 1} (auxiliary, main) for loss_tal_dual.py.
struct YoloLossConfig {
  int64_t nc = 80;                           ///< classes
  int64_t reg_max = 16;                      ///< DFL bins of the head (the loss uses reg_max - 1 = 15)
  std::vector<double> strides{8, 16, 32};    ///< px per level
  double box_gain = 7.5, cls_gain = 0.5, dfl_gain = 1.5;
  std::vector<double> branch_weights{1.0};   ///< one per branch
  TalConfig tal;                             ///< assigner; num_classes is set from nc
  /// When non-empty (one per branch, shapes as tal_assign returns for this batch), these
  /// assignments are used instead of running the assigner: for reusing one branch's targets
  /// (official ComputeLossLH assigns once with the main branch) and for gradient checks with
  /// frozen targets. Throws engine::ShapeError when the count or shapes do not fit.
  std::vector<TalResult> fixed_assign;
  /// Data-parallel training: called once per loss with the raw sums of every branch, [K, 4] F64 on
  /// the maps' device, rows (sum target_scores, sum (1 - CIoU) w, sum BCE, sum DFL w) over this
  /// rank's images; it must replace them in place by their sum over all ranks (an all-reduce), so
  /// that every rank normalises by the global target_scores_sum and reports the global loss.
  /// Empty: this batch alone (the single-process loss).
  std::function<void(engine::Tensor& sums)> reduce_sums;
  /// The B of total = sum(items) * B. 0: this batch's size. Data-parallel training sets the global
  /// batch, so that summing the ranks' gradients gives the gradient of one process on the whole
  /// batch.
  int64_t loss_batch = 0;
  static YoloLossConfig single(int64_t nc) {
    YoloLossConfig c;
    c.nc = nc;
    return c;
  }
  static YoloLossConfig dual(int64_t nc) {
    YoloLossConfig c;
    c.nc = nc;
    c.branch_weights = {0.25, 1.0};
    return c;
  }
};

struct YoloLossResult {
  engine::Tensor total;  ///< [] scalar = (box + cls + dfl) * B; differentiable w.r.t. the head maps
  engine::Tensor items;  ///< [3] detached (box, cls, dfl) after gains and branch weights, not times B
  std::vector<TalResult> assign;                 ///< per branch, target_bboxes in px
  std::vector<engine::Tensor> target_scores_sum; ///< per branch, [] max(sum(target_scores), 1)
};

/// The YOLOv9 TAL loss.
///   branches: per branch (dual: {aux, main}) the training-mode head maps of each level,
///     [B, 4*reg_max + nc, H_l, W_l] NCHW (levels P3, P4, P5 with cfg.strides), one dtype and device
///     (the device's yolo_decode / yolo_branch_loss / tal_assign entries: CPU and CUDA F32, F64).
///   targets: [N, 6] (image index, class, cx, cy, w, h normalised to the input), host tensor.
/// Per branch: decode (softmax-expectation DFL), TaskAlignedAssigner on sigmoid scores and px
/// boxes, then L_cls = sum BCE / tss, L_box = sum (1 - CIoU) w / tss, L_dfl = sum DFL w / tss
/// (tss = max(sum target_scores, 1), after cfg.reduce_sums when set); items = gains * sum_k weight_k
/// * L_k; total = sum(items) * B (B = cfg.loss_batch when set).
/// The backward is one fused kernel per branch (assignment treated as constant, CIoU alpha
/// constant, as officially). Host reads: `targets` (to size the padded gt tensor) and the three
/// per-branch loss values and the incoming gradient (combined with the gains on the host);
/// TODO(CUDA training issue): keep both on the device.
/// Sources: TOOD (Feng et al., ICCV 2021), "Distance-IoU Loss" (Zheng et al., AAAI 2020),
/// "Generalized Focal Loss" (Li et al., NeurIPS 2020), YOLOv9 PGI (Wang et al., 2024); official
/// utils/loss_tal.py and utils/loss_tal_dual.py ComputeLoss.__call__.
/// Throws engine::ShapeError on inconsistent shapes/dtypes/devices. Bitwise deterministic for any
/// thread count (sums accumulate in double per image, then in image order).
YoloLossResult yolo_loss(const std::vector<std::vector<engine::Tensor>>& branches, const engine::Tensor& targets,
                         const YoloLossConfig& cfg);

}  // namespace ops
