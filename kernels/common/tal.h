// Task-Aligned Assigner settings and kernel entry ("TOOD: Task-aligned One-stage Object
// Detection", Feng et al., ICCV 2021, sec. 3.2; official utils/tal/assigner.py
// TaskAlignedAssigner). One settings struct for the op (ops::tal_assign) and the kernels.
#pragma once
#include <cstdint>

#include "engine/backend.h"

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
