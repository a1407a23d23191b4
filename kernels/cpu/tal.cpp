// CPU twin of the Task-Aligned Assigner (kernels/common/tal.h). Follows the official tensor
// program step by step per image: CIoU metrics, in-box candidates, top-k, one gt per anchor,
// targets and the soft-label normalisation.
#include "kernels/common/tal.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/common/box_loss.h"
#include "kernels/cpu/dispatch.h"

namespace kernels::cpu {

namespace {

// torch.topk (CPU, PyTorch 1.13 TopKImpl.h) index set for `largest=true`.
template <typename T>
void topk_indices(const T* row, int64_t n, int64_t k, std::vector<std::pair<double, int64_t>>& q, int64_t* out) {
  using E = std::pair<double, int64_t>;
  q.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) q[j] = E(static_cast<double>(row[j]), j);
  auto cmp = [](const E& x, const E& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
  };
  if (k * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), cmp);
  } else {
    std::nth_element(q.begin(), q.begin() + k - 1, q.end(), cmp);
    std::sort(q.begin(), q.begin() + k - 1, cmp);
  }
  for (int64_t j = 0; j < k; ++j) out[j] = q[j].second;
}

}  // namespace

template <typename T>
void tal_assign_cpu(const T* pd_scores, const T* pd_bboxes, const T* anc, const T* gt_labels, const T* gt_bboxes,
                    const T* mask_gt, int64_t B, int64_t A, int64_t M, const TalConfig& prm, int64_t* target_labels,
                    T* target_bboxes, T* target_scores, bool* fg_mask, int64_t* target_gt_idx) {
  const int64_t nc = prm.num_classes;
  if (M == 0) {
    for (int64_t i = 0; i < B * A; ++i) {
      target_labels[i] = nc;
      fg_mask[i] = false;
      target_gt_idx[i] = 0;
      for (int k = 0; k < 4; ++k) target_bboxes[i * 4 + k] = T(0);
      for (int64_t c = 0; c < nc; ++c) target_scores[i * nc + c] = T(0);
    }
    return;
  }
  const T eps = static_cast<T>(prm.eps);
  const T alpha = static_cast<T>(prm.alpha), beta = static_cast<T>(prm.beta);
  const int64_t K = prm.topk;
  // Scratch (B, M, A): overlaps, align metric, mask_pos.
  std::vector<T> overlaps(static_cast<size_t>(B * M * A)), align(static_cast<size_t>(B * M * A));
  std::vector<uint8_t> mask_pos(static_cast<size_t>(B * M * A));

  // --- 3.1/3.2: metrics, candidates, top-k per (b, m) ---------------------------------------
  // Small problems (tests, tiny images) run serially: fork/join would dominate.
  const bool par = B * M * A > 8192;
#pragma omp parallel if (par)
  {
    std::vector<std::pair<double, int64_t>> q;
    std::vector<T> metric(static_cast<size_t>(A));
    std::vector<uint8_t> in_gts(static_cast<size_t>(A));
    std::vector<int64_t> idx(static_cast<size_t>(K));
    std::vector<int32_t> count(static_cast<size_t>(A));
#pragma omp for schedule(dynamic)
    for (int64_t bm = 0; bm < B * M; ++bm) {
      const int64_t b = bm / M;
      const T* g = gt_bboxes + bm * 4;
      const int64_t label = static_cast<int64_t>(gt_labels[bm]);
      const bool real = mask_gt[bm] != T(0);
      T* ov = overlaps.data() + bm * A;
      T* al = align.data() + bm * A;
      for (int64_t a = 0; a < A; ++a) {
        const T* pb = pd_bboxes + (b * A + a) * 4;
        bool in = false;
        tal_metric_one<T>(g, label, nc, pd_scores + (b * A + a) * nc, pb, anc[a * 2], anc[a * 2 + 1], alpha, beta,
                          ov[a], al[a], in);
        in_gts[a] = in ? 1 : 0;
        metric[a] = al[a] * static_cast<T>(in_gts[a]);
      }
      topk_indices(metric.data(), A, K, q, idx.data());
      if (!real) std::fill(idx.begin(), idx.end(), 0);
      std::fill(count.begin(), count.end(), 0);
      for (int64_t j = 0; j < K; ++j) ++count[idx[j]];
      uint8_t* mp = mask_pos.data() + bm * A;
      for (int64_t a = 0; a < A; ++a) mp[a] = (count[a] == 1 && in_gts[a] && real) ? 1 : 0;
    }
  }

  // --- 3.3-3.5 per image ---------------------------------------------------------------------
#pragma omp parallel if (par)
  {
    std::vector<T> pos_align(static_cast<size_t>(M)), pos_ovl(static_cast<size_t>(M));
#pragma omp for schedule(dynamic)
    for (int64_t b = 0; b < B; ++b) {
      const T* ov = overlaps.data() + b * M * A;
      T* al = align.data() + b * M * A;
      uint8_t* mp = mask_pos.data() + b * M * A;
      for (int64_t a = 0; a < A; ++a) {
        int64_t fg = 0;
        for (int64_t m = 0; m < M; ++m) fg += mp[m * A + a];
        if (fg > 1) {
          int64_t best = 0;
          for (int64_t m = 1; m < M; ++m)
            if (ov[m * A + a] > ov[best * A + a]) best = m;
          for (int64_t m = 0; m < M; ++m) mp[m * A + a] = m == best ? 1 : 0;
          fg = 1;
        }
        int64_t gi = 0;
        for (int64_t m = 0; m < M; ++m)
          if (mp[m * A + a]) {
            gi = m;
            break;
          }
        const int64_t i = b * A + a;
        target_gt_idx[i] = gi;
        fg_mask[i] = fg > 0;
        const int64_t lab = static_cast<int64_t>(gt_labels[b * M + gi]);
        target_labels[i] = lab;
        for (int k = 0; k < 4; ++k) target_bboxes[i * 4 + k] = gt_bboxes[(b * M + gi) * 4 + k];
      }
      for (int64_t m = 0; m < M; ++m) {
        T pa = T(0), po = T(0);
        for (int64_t a = 0; a < A; ++a) {
          al[m * A + a] *= static_cast<T>(mp[m * A + a]);
          pa = std::max(pa, al[m * A + a]);
          po = std::max(po, ov[m * A + a] * static_cast<T>(mp[m * A + a]));
        }
        pos_align[m] = pa;
        pos_ovl[m] = po;
      }
      for (int64_t a = 0; a < A; ++a) {
        T norm = T(0);
        for (int64_t m = 0; m < M; ++m) {
          const T v = al[m * A + a] * pos_ovl[m] / (pos_align[m] + eps);
          norm = m == 0 ? v : std::max(norm, v);
        }
        const int64_t i = b * A + a;
        const int64_t lab = target_labels[i];
        for (int64_t c = 0; c < nc; ++c)
          target_scores[i * nc + c] = (fg_mask[i] && c == lab) ? T(1) * norm : T(0);
      }
    }
  }
}

namespace {

void tal_assign_entry(engine::DeviceContext&, engine::DType dt, const void* pd_scores, const void* pd_bboxes,
                      const void* anc, const void* gt_labels, const void* gt_bboxes, const void* mask_gt, int64_t B,
                      int64_t A, int64_t M, const TalConfig& cfg, int64_t* target_labels, void* target_bboxes,
                      void* target_scores, bool* fg_mask, int64_t* target_gt_idx) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    tal_assign_cpu<T>(static_cast<const T*>(pd_scores), static_cast<const T*>(pd_bboxes), static_cast<const T*>(anc),
                      static_cast<const T*>(gt_labels), static_cast<const T*>(gt_bboxes),
                      static_cast<const T*>(mask_gt), B, A, M, cfg, target_labels, static_cast<T*>(target_bboxes),
                      static_cast<T*>(target_scores), fg_mask, target_gt_idx);
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) { b.add(kTalAssign, &tal_assign_entry, engine::kF32F64); }

}  // namespace kernels::cpu
