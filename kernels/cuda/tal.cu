// CUDA entry of the Task-Aligned Assigner (kernels/common/tal.h), the CPU twin's program
// (kernels/cpu/tal.cpp) split into five launches, all on the device (no host reads):
//   1. one thread per (image, gt, anchor): overlap, align metric, in-gt test (tal_metric_one,
//      shared with the CPU), the (metric, anchor) pairs of the top-k;
//   2. one thread per (image, gt): the top-k set as torch.topk on the CPU selects it, ties
//      included (kernels/common/topk.h, a port of the libstdc++ algorithms torch calls), then
//      mask_pos = in top-k and in the gt and a real gt;
//   3. one thread per (image, anchor): an anchor claimed by several gts keeps the one of highest
//      overlap (first on ties, as argmax), target_gt_idx, fg_mask, labels, boxes;
//   4. one thread per (image, gt): align metric masked, its max and the max masked overlap;
//   5. one thread per (image, anchor): norm_align_metric = max over gts, target_scores.
// Every value comes from the same operations in the same order as on the CPU, so the outputs
// equal the CPU's up to the device's libm (pow/sqrt/atan). Sources: TOOD (Feng et al., ICCV
// 2021) sec. 3.2; official utils/tal/assigner.py TaskAlignedAssigner, utils/metrics.py bbox_iou.
#include <cuda_runtime.h>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/common/tal.h"
#include "kernels/common/topk.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

namespace {

#define Y9_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
__global__ void tal_empty_kernel(int64_t BA, int64_t nc, int64_t* labels, T* bboxes, T* scores, bool* fg,
                                 int64_t* gt_idx) {
  Y9_GRID_LOOP(i, BA) {
    labels[i] = nc;
    fg[i] = false;
    gt_idx[i] = 0;
    for (int k = 0; k < 4; ++k) bboxes[i * 4 + k] = T(0);
    for (int64_t c = 0; c < nc; ++c) scores[i * nc + c] = T(0);
  }
}

template <typename T>
__global__ void tal_metric_kernel(const T* __restrict__ pd_scores, const T* __restrict__ pd_bboxes,
                                  const T* __restrict__ anc, const T* __restrict__ gt_labels,
                                  const T* __restrict__ gt_bboxes, int64_t B, int64_t A, int64_t M, int64_t nc,
                                  T alpha, T beta, T* __restrict__ ov, T* __restrict__ al,
                                  uint8_t* __restrict__ in_gts, uint8_t* __restrict__ mp, TopkPair* __restrict__ q) {
  Y9_GRID_LOOP(i, B * M * A) {
    const int64_t bm = i / A, a = i % A, b = bm / M;
    const int64_t label = static_cast<int64_t>(gt_labels[bm]);
    bool in = false;
    T o, l;
    tal_metric_one<T>(gt_bboxes + bm * 4, label, nc, pd_scores + (b * A + a) * nc, pd_bboxes + (b * A + a) * 4,
                      anc[a * 2], anc[a * 2 + 1], alpha, beta, o, l, in);
    ov[i] = o;
    al[i] = l;
    in_gts[i] = in ? 1 : 0;
    mp[i] = 0;
    q[i] = TopkPair{static_cast<double>(l * static_cast<T>(in ? 1 : 0)), a};
  }
}

template <typename T>
__global__ void tal_topk_kernel(const T* __restrict__ mask_gt, int64_t BM, int64_t A, int64_t K,
                                const uint8_t* __restrict__ in_gts, uint8_t* __restrict__ mp,
                                TopkPair* __restrict__ q) {
  Y9_GRID_LOOP(bm, BM) {
    if (!(mask_gt[bm] != T(0))) continue;  // a padded gt claims nothing
    TopkPair* row = q + bm * A;
    topk_select(row, A, K);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t a = row[j].i;
      mp[bm * A + a] = in_gts[bm * A + a];
    }
  }
}

template <typename T>
__global__ void tal_resolve_kernel(const T* __restrict__ gt_labels, const T* __restrict__ gt_bboxes, int64_t B,
                                   int64_t A, int64_t M, const T* __restrict__ ov, uint8_t* __restrict__ mp,
                                   int64_t* __restrict__ labels, T* __restrict__ bboxes, bool* __restrict__ fg_mask,
                                   int64_t* __restrict__ gt_idx) {
  Y9_GRID_LOOP(i, B * A) {
    const int64_t b = i / A, a = i % A;
    const T* o = ov + b * M * A;
    uint8_t* m_ = mp + b * M * A;
    int64_t fg = 0;
    for (int64_t m = 0; m < M; ++m) fg += m_[m * A + a];
    if (fg > 1) {
      int64_t best = 0;
      for (int64_t m = 1; m < M; ++m)
        if (o[m * A + a] > o[best * A + a]) best = m;
      for (int64_t m = 0; m < M; ++m) m_[m * A + a] = m == best ? 1 : 0;
      fg = 1;
    }
    int64_t gi = 0;
    for (int64_t m = 0; m < M; ++m)
      if (m_[m * A + a]) {
        gi = m;
        break;
      }
    gt_idx[i] = gi;
    fg_mask[i] = fg > 0;
    labels[i] = static_cast<int64_t>(gt_labels[b * M + gi]);
    for (int k = 0; k < 4; ++k) bboxes[i * 4 + k] = gt_bboxes[(b * M + gi) * 4 + k];
  }
}

template <typename T>
__global__ void tal_pos_kernel(int64_t BM, int64_t A, const T* __restrict__ ov, T* __restrict__ al,
                               const uint8_t* __restrict__ mp, T* __restrict__ pos_align, T* __restrict__ pos_ovl) {
  Y9_GRID_LOOP(bm, BM) {
    T pa = T(0), po = T(0);
    for (int64_t a = 0; a < A; ++a) {
      const int64_t i = bm * A + a;
      al[i] *= static_cast<T>(mp[i]);
      const T x = al[i], y = ov[i] * static_cast<T>(mp[i]);
      pa = pa < x ? x : pa;  // std::max(pa, x)
      po = po < y ? y : po;
    }
    pos_align[bm] = pa;
    pos_ovl[bm] = po;
  }
}

template <typename T>
__global__ void tal_scores_kernel(int64_t B, int64_t A, int64_t M, int64_t nc, T eps, const T* __restrict__ al,
                                  const T* __restrict__ pos_align, const T* __restrict__ pos_ovl,
                                  const int64_t* __restrict__ labels, const bool* __restrict__ fg_mask,
                                  T* __restrict__ scores) {
  Y9_GRID_LOOP(i, B * A) {
    const int64_t b = i / A, a = i % A;
    T norm = T(0);
    for (int64_t m = 0; m < M; ++m) {
      const int64_t bm = b * M + m;
      const T v = al[bm * A + a] * pos_ovl[bm] / (pos_align[bm] + eps);
      norm = m == 0 ? v : (norm < v ? v : norm);  // std::max(norm, v)
    }
    const int64_t lab = labels[i];
    const bool f = fg_mask[i];
    for (int64_t c = 0; c < nc; ++c) scores[i * nc + c] = (f && c == lab) ? T(1) * norm : T(0);
  }
}

#undef Y9_GRID_LOOP

inline size_t align16(size_t n) { return (n + 15) / 16 * 16; }

template <typename T>
void tal_assign_cuda(engine::DeviceContext& ctx, const T* pd_scores, const T* pd_bboxes, const T* anc,
                     const T* gt_labels, const T* gt_bboxes, const T* mask_gt, int64_t B, int64_t A, int64_t M,
                     const TalConfig& cfg, int64_t* labels, T* bboxes, T* scores, bool* fg, int64_t* gt_idx) {
  auto st = static_cast<cudaStream_t>(ctx.stream());
  const int64_t nc = cfg.num_classes;
  if (B * A == 0) return;
  if (M == 0) {
    Y9_LAUNCH(tal_empty_kernel<T>, grid_for(B * A), kBlock, 0, st, B * A, nc, labels, bboxes, scores, fg, gt_idx);
    return;
  }
  const int64_t BM = B * M, BMA = B * M * A;
  // Scratch (B, M, A): overlaps, align metric, top-k pairs, in-gt and mask_pos bytes; (B, M) maxima.
  const size_t o_ov = 0, o_al = o_ov + align16(sizeof(T) * BMA), o_q = o_al + align16(sizeof(T) * BMA),
               o_in = o_q + align16(sizeof(TopkPair) * BMA), o_mp = o_in + align16(BMA),
               o_pa = o_mp + align16(BMA), o_po = o_pa + align16(sizeof(T) * BM),
               total = o_po + align16(sizeof(T) * BM);
  engine::Tensor scratch = engine::Tensor::empty({static_cast<int64_t>(total)}, engine::DType::U8, ctx.device());
  auto* base = static_cast<unsigned char*>(scratch.data_ptr());
  T* ov = reinterpret_cast<T*>(base + o_ov);
  T* al = reinterpret_cast<T*>(base + o_al);
  auto* q = reinterpret_cast<TopkPair*>(base + o_q);
  uint8_t* in_gts = base + o_in;
  uint8_t* mp = base + o_mp;
  T* pa = reinterpret_cast<T*>(base + o_pa);
  T* po = reinterpret_cast<T*>(base + o_po);

  Y9_LAUNCH(tal_metric_kernel<T>, grid_for(BMA), kBlock, 0, st, pd_scores, pd_bboxes, anc, gt_labels, gt_bboxes, B, A,
            M, nc, static_cast<T>(cfg.alpha), static_cast<T>(cfg.beta), ov, al, in_gts, mp, q);
  if (cfg.topk > 0)
    Y9_LAUNCH(tal_topk_kernel<T>, grid_for(BM, 64), 64, 0, st, mask_gt, BM, A, cfg.topk, in_gts, mp, q);
  Y9_LAUNCH(tal_resolve_kernel<T>, grid_for(B * A), kBlock, 0, st, gt_labels, gt_bboxes, B, A, M, ov, mp, labels,
            bboxes, fg, gt_idx);
  Y9_LAUNCH(tal_pos_kernel<T>, grid_for(BM, 64), 64, 0, st, BM, A, ov, al, mp, pa, po);
  Y9_LAUNCH(tal_scores_kernel<T>, grid_for(B * A), kBlock, 0, st, B, A, M, nc, static_cast<T>(cfg.eps), al, pa, po,
            labels, fg, scores);
  // `scratch` goes back to the caching allocator here; its blocks are reused only by later work
  // on this same compute stream, which runs after these kernels.
}

void tal_assign_entry(engine::DeviceContext& ctx, engine::DType dt, const void* pd_scores, const void* pd_bboxes,
                      const void* anc, const void* gt_labels, const void* gt_bboxes, const void* mask_gt, int64_t B,
                      int64_t A, int64_t M, const TalConfig& cfg, int64_t* target_labels, void* target_bboxes,
                      void* target_scores, bool* fg_mask, int64_t* target_gt_idx) {
  auto run = [&]<typename T>() {
    tal_assign_cuda<T>(ctx, static_cast<const T*>(pd_scores), static_cast<const T*>(pd_bboxes),
                       static_cast<const T*>(anc), static_cast<const T*>(gt_labels), static_cast<const T*>(gt_bboxes),
                       static_cast<const T*>(mask_gt), B, A, M, cfg, target_labels, static_cast<T*>(target_bboxes),
                       static_cast<T*>(target_scores), fg_mask, target_gt_idx);
  };
  if (dt == engine::DType::F32) run.template operator()<float>();
  else if (dt == engine::DType::F64) run.template operator()<double>();
  else Y9_CHECK_SHAPE(false, "tal_assign: dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64)");
}

}  // namespace

/// CUDA Task-Aligned Assigner (see kTalAssign in kernels/common/tal.h for shapes), F32 and F64:
/// five launches on the compute stream, device scratch from the caching allocator, no host reads;
/// outputs equal the CPU twin's, top-k ties included.
Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) { b.add(kTalAssign, &tal_assign_entry, engine::kF32F64); }

}  // namespace kernels::cuda
