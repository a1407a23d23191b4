// Kernel entries of one branch of the YOLOv9 TAL loss (official utils/loss_tal.py ComputeLoss):
// DFL box decoding, and the fused cls (BCE) + box (CIoU) + DFL terms with their backward.
// Layouts: pred [B, A, no] contiguous with no = 4*reg + nc (distribution logits, then class
// logits); anchors [A, 2] in grid units, stride [A] px; all of `dtype`.
#pragma once
#include <cstdint>

#include "engine/backend.h"

namespace kernels {

/// Decodes pred into sigmoid scores [B, A, nc], boxes in grid units [B, A, 4] (xyxy) and the same
/// boxes times the anchor stride [B, A, 4] (px, what the assigner sees).
using YoloDecodeFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* pred, const void* anc,
                              const void* stride, int64_t B, int64_t A, int64_t nc, int reg, void* scores,
                              void* box_grid, void* box_px);
inline engine::KernelKey<YoloDecodeFn> kYoloDecode{"yolo_decode"};

/// Forward of one branch: target_bboxes [B, A, 4] px, target_scores [B, A, nc], fg [B, A] Bool
/// (assigner outputs). Writes the raw sums of the branch, sums[0..3] = (sum target_scores,
/// sum (1 - CIoU) w, sum BCE, sum DFL w), F64 in the device's memory; the op divides them by
/// target_scores_sum = max(sums[0], 1) after an optional reduction across ranks (data-parallel
/// training normalises by the global sum). CPU sums accumulate in double, per image then in
/// image order.
using YoloBranchLossForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* pred,
                                         const void* box_grid, const void* anc, const void* stride,
                                         const void* target_bboxes, const void* target_scores, const bool* fg,
                                         int64_t B, int64_t A, int64_t nc, int reg, double* sums);
inline engine::KernelKey<YoloBranchLossForwardFn> kYoloBranchLossForward{"yolo_branch_loss_forward"};

/// grad_pred [B, A, no] = coef[0] dL_box/dpred + coef[1] dL_cls/dpred + coef[2] dL_dfl/dpred
/// (overwrites). coef is host memory; tss as the forward wrote it.
using YoloBranchLossBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* pred,
                                          const void* box_grid, const void* anc, const void* stride,
                                          const void* target_bboxes, const void* target_scores, const bool* fg,
                                          const void* tss, int64_t B, int64_t A, int64_t nc, int reg,
                                          const double* coef, void* grad_pred);
inline engine::KernelKey<YoloBranchLossBackwardFn> kYoloBranchLossBackward{"yolo_branch_loss_backward"};

}  // namespace kernels
