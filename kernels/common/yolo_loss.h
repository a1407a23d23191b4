// Kernel entries of one branch of the YOLOv9 TAL loss (official utils/loss_tal.py ComputeLoss):
// DFL box decoding, and the fused cls (BCE) + box (CIoU) + DFL terms with their backward.
// Layouts: pred [B, A, no] contiguous with no = 4*reg + nc (distribution logits, then class
// logits); anchors [A, 2] in grid units, stride [A] px; all of `dtype`.
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/hd.h"
#include "kernels/common/box_loss.h"
#include "kernels/common/elementwise.h"

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

/// Finishes the loss from the raw sums of K branches, on whichever side runs it (the host
/// arithmetic ops::yolo_loss used to do after reading the sums): per branch tss = max(sums[k][0], 1)
/// (a NaN sum stays NaN, as std::max(NaN, 1)) and L_k,i = sums[k][1 + i] / tss in double, each
/// rounded to T (i = box, cls, dfl); out[i] = gain_i * sum_k w_k L_k,i (k in order, from 0) for
/// i < 3 and out[3] = (out[0] + out[1] + out[2]) * loss_batch, all in double, rounded to T at
/// the end. sums: [K, 4] (ts_sum, box, cls, dfl); w: [K]; gains: [3] (box, cls, dfl).
/// Writes tss[K] (T) and out[4] (T). Deterministic (one thread, fixed order, no FMA).
template <typename T>
Y9_HD void yolo_loss_finish_one(const double* sums, int64_t K, const double* w, const double* gains,
                                double loss_batch, T* tss, T* out) {
  double o[3];
  for (int i = 0; i < 3; ++i) {
    double s = 0;
    for (int64_t k = 0; k < K; ++k) {
      const double s0 = sums[4 * k];
      const double d = s0 < 1.0 ? 1.0 : s0;  // std::max(s0, 1.0)
      const double raw = k_round_to<T>(sums[4 * k + 1 + i] / d);
      s = k_add_rn(s, k_mul_rn(w[k], raw));
    }
    o[i] = k_mul_rn(gains[i], s);
  }
  for (int64_t k = 0; k < K; ++k) {
    const double s0 = sums[4 * k];
    tss[k] = static_cast<T>(s0 < 1.0 ? 1.0 : s0);
  }
  for (int i = 0; i < 3; ++i) out[i] = static_cast<T>(o[i]);
  out[3] = static_cast<T>(k_mul_rn(k_add_rn(k_add_rn(o[0], o[1]), o[2]), loss_batch));
}

/// The backward's per-term coefficients of one branch from the incoming gradient g[4] (T) of
/// out = (box, cls, dfl, total): d out / d L_k,i = w * gain_i * (g[i] + loss_batch * g[3]) in
/// double, rounded to T and times inv = 1 / tss (T): cb (box), cc (cls), cd (dfl).
template <typename T>
Y9_HD void yolo_loss_grad_coef(const T* g, double w, const double* gains, double loss_batch, T inv, T& cb, T& cc,
                               T& cd) {
  T c[3];
  const double g3 = k_mul_rn(loss_batch, static_cast<double>(g[3]));
  for (int i = 0; i < 3; ++i)
    c[i] = static_cast<T>(k_mul_rn(k_mul_rn(w, gains[i]), k_add_rn(static_cast<double>(g[i]), g3)));
  cb = c[0] * inv;
  cc = c[1] * inv;
  cd = c[2] * inv;
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

/// grad_pred [B, A, no] = c_box dL_box/dpred + c_cls dL_cls/dpred + c_dfl dL_dfl/dpred
/// (overwrites), the coefficients from yolo_loss_grad_coef: grad_out is the incoming gradient of
/// the op's out [4] (box, cls, dfl, total), 4 contiguous values of `dtype` in the device's memory
/// (read on the device: no host synchronisation); branch_weight, gains[3] (box, cls, dfl, host
/// memory) and loss_batch are host constants; tss as yolo_loss_finish wrote it.
using YoloBranchLossBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* pred,
                                          const void* box_grid, const void* anc, const void* stride,
                                          const void* target_bboxes, const void* target_scores, const bool* fg,
                                          const void* tss, int64_t B, int64_t A, int64_t nc, int reg,
                                          const void* grad_out, double branch_weight, const double* gains,
                                          int64_t loss_batch, void* grad_pred);
inline engine::KernelKey<YoloBranchLossBackwardFn> kYoloBranchLossBackward{"yolo_branch_loss_backward"};

/// Branches a CUDA yolo_loss_finish takes (its weights travel as a kernel parameter).
constexpr int64_t kYoloLossMaxBranches = 64;

/// Finishes the loss on the device (yolo_loss_finish_one): sums [K, 4] F64 in the device's
/// memory, as the branches' forwards wrote them (after any all-reduce); branch_weights [K] and
/// gains [3] (box, cls, dfl) are host memory. Writes tss [K] and out [4] (box, cls, dfl, total)
/// of `dtype` in the device's memory. No host reads. Throws ShapeError when K > 64 on CUDA.
using YoloLossFinishFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const double* sums, int64_t K,
                                  const double* branch_weights, const double* gains, int64_t loss_batch, void* tss,
                                  void* out);
inline engine::KernelKey<YoloLossFinishFn> kYoloLossFinish{"yolo_loss_finish"};

}  // namespace kernels
