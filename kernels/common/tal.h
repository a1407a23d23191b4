// Task-Aligned Assigner settings and kernel entry ("TOOD: Task-aligned One-stage Object
// Detection", Feng et al., ICCV 2021, sec. 3.2; official utils/tal/assigner.py
// TaskAlignedAssigner). One settings struct for the op (ops::tal_assign) and the kernels.
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/hd.h"
#include "kernels/common/box_loss.h"

namespace kernels {

/// TaskAlignedAssigner settings; defaults are those both official ComputeLoss classes construct
/// (topk 10, alpha 0.5, beta 6.0, eps 1e-9). num_classes must be set (nc of the head).
struct TalConfig {
  int64_t topk = 10;
  int64_t num_classes = 80;
  double alpha = 0.5;
  double beta = 6.0;
  double eps = 1e-9;
};

/// select_candidates_in_gts(eps=1e-9): its own default, not the assigner's eps.
constexpr double kTalInGtsEps = 1e-9;

Y9_HD float k_sqrt_tal(float x) { return sqrtf(x); }
Y9_HD double k_sqrt_tal(double x) { return ::sqrt(x); }
Y9_HD float k_pow_tal(float x, float p) { return powf(x, p); }
Y9_HD double k_pow_tal(double x, double p) { return ::pow(x, p); }

/// x ** p as torch computes it: pow(x, 0.5) dispatches to sqrt.
template <typename T>
Y9_HD T tal_pow(T x, T p) {
  if (p == T(0.5)) return k_sqrt_tal(x);
  return k_pow_tal(x, p);
}

/// The per-(gt, anchor) quantities of the assigner (official TaskAlignedAssigner.get_box_metrics
/// and select_candidates_in_gts): overlap = CIoU(gt, pd_box).clamp(0) (NaN propagates),
/// align = score[label]^alpha * overlap^beta (score 0 for a label outside [0, nc)), in_gts =
/// min(ax - x1, ay - y1, x2 - ax, y2 - ay) > 1e-9. Shared by the CPU twin and the CUDA kernels.
/// `scores` is the anchor's row of pd_scores [nc]; g the gt box, pb the predicted box, xyxy px.
template <typename T>
Y9_HD void tal_metric_one(const T* g, int64_t label, int64_t nc, const T* scores, const T* pb, T ax, T ay, T alpha,
                          T beta, T& overlap, T& align, bool& in_gts) {
  T o = ciou_fwd<T>(g, pb, static_cast<T>(kCiouEps));
  o = o < T(0) ? T(0) : o;  // clamp(0); NaN propagates like torch
  overlap = o;
  const T s = (label >= 0 && label < nc) ? scores[label] : T(0);
  align = tal_pow(s, alpha) * tal_pow(o, beta);
  T d = ax - g[0];
  T e = ay - g[1];
  d = e < d ? e : d;  // std::min(d, e)
  e = g[2] - ax;
  d = e < d ? e : d;
  e = g[3] - ay;
  d = e < d ? e : d;
  in_gts = d > kTalInGtsEps;
}

/// Assigns B images at once. pd_scores [B, A, nc] probabilities; pd_bboxes [B, A, 4] xyxy px;
/// anc [A, 2] px; gt_labels [B, M] (float class ids); gt_bboxes [B, M, 4] xyxy px; mask_gt [B, M]
/// (0/1), all of `dtype`. Outputs: target_labels [B, A] I64, target_bboxes [B, A, 4] px,
/// target_scores [B, A, nc] (dtype), fg_mask [B, A] Bool, target_gt_idx [B, A] I64. M == 0 gives
/// the official empty result. Top-k ties resolve as torch.topk on the CPU. Deterministic.
using TalAssignFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* pd_scores,
                             const void* pd_bboxes, const void* anc, const void* gt_labels, const void* gt_bboxes,
                             const void* mask_gt, int64_t B, int64_t A, int64_t M, const TalConfig& cfg,
                             int64_t* target_labels, void* target_bboxes, void* target_scores, bool* fg_mask,
                             int64_t* target_gt_idx);
inline engine::KernelKey<TalAssignFn> kTalAssign{"tal_assign"};

}  // namespace kernels
