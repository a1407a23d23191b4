// CPU twin of one branch of the YOLOv9 TAL loss (official utils/loss_tal.py ComputeLoss):
// DFL box decoding, and the fused cls (BCE) + box (CIoU) + DFL terms with their backward.
// Layouts: pred [B, A, no] contiguous with no = 4*reg + nc (distribution logits, then class logits).
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// Decodes pred into sigmoid scores [B, A, nc], boxes in grid units [B, A, 4] (xyxy) and the same
/// boxes times the anchor stride [B, A, 4] (px, what the assigner sees). anc [A, 2] grid units,
/// stride [A].
template <typename T>
void yolo_decode_cpu(const T* pred, const T* anc, const T* stride, int64_t B, int64_t A, int64_t nc, int reg,
                     T* scores, T* box_grid, T* box_px);

/// Forward of one branch. target_bboxes [B, A, 4] px (assigner output), target_scores [B, A, nc],
/// fg [B, A]. Writes out[0..2] = L_box, L_cls, L_dfl (each divided by target_scores_sum, no gains)
/// and *tss = max(sum(target_scores), 1). Sums accumulate in double.
template <typename T>
void yolo_branch_loss_forward_cpu(const T* pred, const T* box_grid, const T* anc, const T* stride,
                                  const T* target_bboxes, const T* target_scores, const bool* fg, int64_t B,
                                  int64_t A, int64_t nc, int reg, T* out, T* tss);

/// Backward of one branch: grad_pred [B, A, no] = coef[0] dL_box/dpred + coef[1] dL_cls/dpred +
/// coef[2] dL_dfl/dpred (overwrites grad_pred). coef is read from host memory.
template <typename T>
void yolo_branch_loss_backward_cpu(const T* pred, const T* box_grid, const T* anc, const T* stride,
                                   const T* target_bboxes, const T* target_scores, const bool* fg, const T* tss,
                                   int64_t B, int64_t A, int64_t nc, int reg, const double* coef, T* grad_pred);

}  // namespace kernels::cpu
