// Kernel entries of one branch of the YOLOv9 TAL loss (official utils/loss_tal.py ComputeLoss):
// DFL box decoding, and the fused cls (BCE) + box (CIoU) + DFL terms with their backward.
// Layouts: pred [B, A, no] contiguous with no = 4*reg + nc (distribution logits, then class
// logits); anchors [A, 2] in grid units, stride [A] px; all of `dtype`.
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/hd.h"
#include "kernels/common/box_loss.h"

namespace kernels {

// --- per-anchor math shared by the CPU twin (kernels/cpu/yolo_loss.cpp) and the CUDA kernels ---

/// Decodes anchor `a`'s row p[no] (official DDetect bbox_decode: softmax-expectation per side, then
/// dist2bbox xyxy; sigmoid scores): scores[nc], bg[4] in grid units, bp[4] = bg * stride.
template <typename T>
Y9_HD void yolo_decode_one(const T* p, T ax, T ay, T st, int64_t nc, int reg, T* scores, T* bg, T* bp) {
  T d[4];
  for (int s = 0; s < 4; ++s) d[s] = dfl_expect_fwd<T>(p + s * reg, reg, nullptr);
  bg[0] = ax - d[0];
  bg[1] = ay - d[1];
  bg[2] = ax + d[2];
  bg[3] = ay + d[3];
  for (int k = 0; k < 4; ++k) bp[k] = bg[k] * st;
  for (int64_t c = 0; c < nc; ++c) scores[c] = T(1) / (T(1) + k_exp_box(-p[4 * reg + c]));
}

/// Adds anchor i's terms to the running double sums, in the CPU twin's order (official
/// ComputeLoss: BCE over every class of every anchor; for a foreground anchor (1 - CIoU(pred,
/// target / stride)) * w and the DFL of bbox2dist(anchor, target, reg - 1) times w, with
/// w = target_scores.sum(-1) in T). p: pred row [no]; bg: decoded box, grid units; tb: target
/// box px; ts: target_scores row [nc].
template <typename T>
Y9_HD void yolo_anchor_loss_add(const T* p, const T* bg, T ax, T ay, T st, const T* tb, const T* ts, bool fg,
                                int64_t nc, int reg, double& ts_sum, double& cls, double& box, double& dfl) {
  for (int64_t c = 0; c < nc; ++c) {
    ts_sum += static_cast<double>(ts[c]);
    cls += static_cast<double>(bce_logits_fwd<T>(p[4 * reg + c], ts[c]));
  }
  if (!fg) return;
  T wt = T(0);  // bbox_weight = target_scores.sum(-1) in T
  for (int64_t c = 0; c < nc; ++c) wt += ts[c];
  T tg[4];
  for (int k = 0; k < 4; ++k) tg[k] = tb[k] / st;  // official: target_bboxes /= stride_tensor
  const T iou = ciou_fwd<T>(bg, tg, static_cast<T>(kCiouEps));
  box += static_cast<double>((T(1) - iou) * wt);
  T ltrb[4];
  bbox2dist_one<T>(ax, ay, tg, static_cast<double>(reg - 1), ltrb);
  T s = T(0);
  for (int k = 0; k < 4; ++k) s += dfl_side_fwd<T>(p + k * reg, reg, ltrb[k]);
  dfl += static_cast<double>(s / T(4) * wt);
}

/// Gradient of one anchor's terms w.r.t. its pred row, g[no] (overwritten): cc * dBCE/dlogit for
/// the classes; for a foreground anchor the CIoU gradient (scaled by -cb * w) through the decode
/// (x1 = ax - l, ...) and the softmax expectation, plus cd * w / 4 * dDFL/dlogits.
/// cb, cc, cd: the gains already divided by target_scores_sum.
template <typename T>
Y9_HD void yolo_anchor_loss_grad(const T* p, const T* bg, T ax, T ay, T st, const T* tb, const T* ts, bool fg,
                                 int64_t nc, int reg, T cb, T cc, T cd, T* g) {
  for (int64_t c = 0; c < nc; ++c) g[4 * reg + c] = cc * bce_logits_bwd<T>(p[4 * reg + c], ts[c]);
  for (int k = 0; k < 4 * reg; ++k) g[k] = T(0);
  if (!fg) return;
  T wt = T(0);
  for (int64_t c = 0; c < nc; ++c) wt += ts[c];
  T tg[4];
  for (int k = 0; k < 4; ++k) tg[k] = tb[k] / st;
  T gpb[4] = {0, 0, 0, 0}, gtb[4] = {0, 0, 0, 0};
  ciou_bwd<T>(bg, tg, static_cast<T>(kCiouEps), -cb * wt, gpb, gtb);
  const T gd[4] = {-gpb[0], -gpb[1], gpb[2], gpb[3]};
  for (int k = 0; k < 4; ++k) dfl_expect_bwd<T>(p + k * reg, reg, gd[k], g + k * reg);
  T ltrb[4];
  bbox2dist_one<T>(ax, ay, tg, static_cast<double>(reg - 1), ltrb);
  for (int k = 0; k < 4; ++k) dfl_side_bwd<T>(p + k * reg, reg, ltrb[k], cd * wt / T(4), g + k * reg);
}

// --- kernel entries -----------------------------------------------------------------------------

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
