// CPU twin of the Task-Aligned Assigner (TOOD, Feng et al., ICCV 2021), official
// utils/tal/assigner.py TaskAlignedAssigner. Raw pointers, contiguous row-major buffers.
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// Assigner hyper-parameters (official defaults of both ComputeLoss classes).
struct TalParams {
  int64_t topk = 10;
  int64_t num_classes = 80;
  double alpha = 0.5;
  double beta = 6.0;
  double eps = 1e-9;
};

/// Assigns B images at once (OpenMP over images and gts).
/// pd_scores [B, A, nc] probabilities; pd_bboxes [B, A, 4] xyxy px; anc [A, 2] px;
/// gt_labels [B, M] (float class ids); gt_bboxes [B, M, 4] xyxy px; mask_gt [B, M] (0/1).
/// Outputs: target_labels [B, A], target_bboxes [B, A, 4] px, target_scores [B, A, nc],
/// fg_mask [B, A], target_gt_idx [B, A]. M == 0 gives the official empty result.
/// Top-k reproduces torch.topk on the CPU (std::nth_element / partial_sort on (value, index)
/// pairs with the same comparator), so ties between zero metrics resolve as in PyTorch 1.13
/// when built against the same libstdc++ algorithm.
template <typename T>
void tal_assign_cpu(const T* pd_scores, const T* pd_bboxes, const T* anc, const T* gt_labels, const T* gt_bboxes,
                    const T* mask_gt, int64_t B, int64_t A, int64_t M, const TalParams& prm, int64_t* target_labels,
                    T* target_bboxes, T* target_scores, bool* fg_mask, int64_t* target_gt_idx);

}  // namespace kernels::cpu
