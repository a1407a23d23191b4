// CPU twin of one branch of the YOLOv9 TAL loss (kernels/common/yolo_loss.h). Per-anchor math
// comes from kernels/common/box.h; anchors are independent, so loops run in parallel.
#include "kernels/common/yolo_loss.h"

#include <algorithm>
#include <vector>

#include "kernels/common/box_loss.h"
#include "kernels/cpu/dispatch.h"

namespace kernels::cpu {

namespace {
// Below this many anchors the OpenMP fork/join costs more than the work (small images, tests).
constexpr int64_t kParallelMin = 4096;
// Target box of a positive anchor in grid units (official: target_bboxes /= stride_tensor).
template <typename T>
void target_grid(const T* tb_px, T s, T* out) {
  for (int k = 0; k < 4; ++k) out[k] = tb_px[k] / s;
}
}  // namespace

template <typename T>
void yolo_decode_cpu(const T* pred, const T* anc, const T* stride, int64_t B, int64_t A, int64_t nc, int reg,
                     T* scores, T* box_grid, T* box_px) {
  const int64_t no = 4 * reg + nc;
#pragma omp parallel for schedule(static) if (B * A > kParallelMin)
  for (int64_t i = 0; i < B * A; ++i) {
    const int64_t a = i % A;
    const T* p = pred + i * no;
    T d[4];
    for (int s = 0; s < 4; ++s) d[s] = dfl_expect_fwd<T>(p + s * reg, reg, nullptr);
    const T ax = anc[a * 2], ay = anc[a * 2 + 1], st = stride[a];
    T* bg = box_grid + i * 4;
    bg[0] = ax - d[0];
    bg[1] = ay - d[1];
    bg[2] = ax + d[2];
    bg[3] = ay + d[3];
    for (int k = 0; k < 4; ++k) box_px[i * 4 + k] = bg[k] * st;
    for (int64_t c = 0; c < nc; ++c) scores[i * nc + c] = T(1) / (T(1) + k_exp_box(-p[4 * reg + c]));
  }
}

template <typename T>
void yolo_branch_loss_forward_cpu(const T* pred, const T* box_grid, const T* anc, const T* stride,
                                  const T* target_bboxes, const T* target_scores, const bool* fg, int64_t B,
                                  int64_t A, int64_t nc, int reg, double* sums) {
  const int64_t no = 4 * reg + nc;
  // Per-image partial sums combined in image order: bitwise reproducible for any thread count.
  std::vector<double> part(static_cast<size_t>(B * 4), 0.0);
#pragma omp parallel for schedule(static) if (B * A > kParallelMin)
  for (int64_t b = 0; b < B; ++b) {
    double ts_sum = 0, cls = 0, box = 0, dfl = 0;
    for (int64_t i = b * A; i < (b + 1) * A; ++i) {
      const int64_t a = i % A;
      const T* p = pred + i * no;
      const T* ts = target_scores + i * nc;
      for (int64_t c = 0; c < nc; ++c) {
        ts_sum += static_cast<double>(ts[c]);
        cls += static_cast<double>(bce_logits_fwd<T>(p[4 * reg + c], ts[c]));
      }
      if (!fg[i]) continue;
      T wt = T(0);  // bbox_weight = target_scores.sum(-1) in T
      for (int64_t c = 0; c < nc; ++c) wt += ts[c];
      T tg[4];
      target_grid(target_bboxes + i * 4, stride[a], tg);
      const T iou = ciou_fwd<T>(box_grid + i * 4, tg, static_cast<T>(kCiouEps));
      box += static_cast<double>((T(1) - iou) * wt);
      T ltrb[4];
      bbox2dist_one<T>(anc[a * 2], anc[a * 2 + 1], tg, static_cast<double>(reg - 1), ltrb);
      T s = T(0);
      for (int k = 0; k < 4; ++k) s += dfl_side_fwd<T>(p + k * reg, reg, ltrb[k]);
      dfl += static_cast<double>(s / T(4) * wt);
    }
    part[b * 4] = ts_sum;
    part[b * 4 + 1] = cls;
    part[b * 4 + 2] = box;
    part[b * 4 + 3] = dfl;
  }
  double ts_sum = 0, cls = 0, box = 0, dfl = 0;
  for (int64_t b = 0; b < B; ++b) {
    ts_sum += part[b * 4];
    cls += part[b * 4 + 1];
    box += part[b * 4 + 2];
    dfl += part[b * 4 + 3];
  }
  sums[0] = ts_sum;
  sums[1] = box;
  sums[2] = cls;
  sums[3] = dfl;
}

template <typename T>
void yolo_branch_loss_backward_cpu(const T* pred, const T* box_grid, const T* anc, const T* stride,
                                   const T* target_bboxes, const T* target_scores, const bool* fg, const T* tss,
                                   int64_t B, int64_t A, int64_t nc, int reg, const double* coef, T* grad_pred) {
  const int64_t no = 4 * reg + nc;
  const T inv = T(1) / *tss;
  const T cb = static_cast<T>(coef[0]) * inv, cc = static_cast<T>(coef[1]) * inv, cd = static_cast<T>(coef[2]) * inv;
#pragma omp parallel for schedule(static) if (B * A > kParallelMin)
  for (int64_t i = 0; i < B * A; ++i) {
    const int64_t a = i % A;
    const T* p = pred + i * no;
    const T* ts = target_scores + i * nc;
    T* g = grad_pred + i * no;
    for (int64_t c = 0; c < nc; ++c) g[4 * reg + c] = cc * bce_logits_bwd<T>(p[4 * reg + c], ts[c]);
    for (int k = 0; k < 4 * reg; ++k) g[k] = T(0);
    if (!fg[i]) continue;
    T wt = T(0);
    for (int64_t c = 0; c < nc; ++c) wt += ts[c];
    T tg[4];
    target_grid(target_bboxes + i * 4, stride[a], tg);
    // Box: d[(1 - CIoU(pred, tgt)) * w] / d pred_box, then through the decode (x1 = ax - l, ...).
    T gpb[4] = {0, 0, 0, 0}, gtb[4] = {0, 0, 0, 0};
    ciou_bwd<T>(box_grid + i * 4, tg, static_cast<T>(kCiouEps), -cb * wt, gpb, gtb);
    const T gd[4] = {-gpb[0], -gpb[1], gpb[2], gpb[3]};
    for (int k = 0; k < 4; ++k) dfl_expect_bwd<T>(p + k * reg, reg, gd[k], g + k * reg);
    // DFL.
    T ltrb[4];
    bbox2dist_one<T>(anc[a * 2], anc[a * 2 + 1], tg, static_cast<double>(reg - 1), ltrb);
    for (int k = 0; k < 4; ++k) dfl_side_bwd<T>(p + k * reg, reg, ltrb[k], cd * wt / T(4), g + k * reg);
  }
}

namespace {

using engine::DeviceContext;
using engine::DType;

void decode_entry(DeviceContext&, DType dt, const void* pred, const void* anc, const void* stride, int64_t B,
                  int64_t A, int64_t nc, int reg, void* scores, void* box_grid, void* box_px) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    yolo_decode_cpu<T>(static_cast<const T*>(pred), static_cast<const T*>(anc), static_cast<const T*>(stride), B, A,
                       nc, reg, static_cast<T*>(scores), static_cast<T*>(box_grid), static_cast<T*>(box_px));
  });
}

void forward_entry(DeviceContext&, DType dt, const void* pred, const void* box_grid, const void* anc,
                   const void* stride, const void* target_bboxes, const void* target_scores, const bool* fg, int64_t B,
                   int64_t A, int64_t nc, int reg, double* sums) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    yolo_branch_loss_forward_cpu<T>(static_cast<const T*>(pred), static_cast<const T*>(box_grid),
                                    static_cast<const T*>(anc), static_cast<const T*>(stride),
                                    static_cast<const T*>(target_bboxes), static_cast<const T*>(target_scores), fg, B,
                                    A, nc, reg, sums);
  });
}

void backward_entry(DeviceContext&, DType dt, const void* pred, const void* box_grid, const void* anc,
                    const void* stride, const void* target_bboxes, const void* target_scores, const bool* fg,
                    const void* tss, int64_t B, int64_t A, int64_t nc, int reg, const double* coef,
                    void* grad_pred) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    yolo_branch_loss_backward_cpu<T>(static_cast<const T*>(pred), static_cast<const T*>(box_grid),
                                     static_cast<const T*>(anc), static_cast<const T*>(stride),
                                     static_cast<const T*>(target_bboxes), static_cast<const T*>(target_scores), fg,
                                     static_cast<const T*>(tss), B, A, nc, reg, coef, static_cast<T*>(grad_pred));
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kYoloDecode, &decode_entry, engine::kF32F64);
  b.add(kYoloBranchLossForward, &forward_entry, engine::kF32F64);
  b.add(kYoloBranchLossBackward, &backward_entry, engine::kF32F64);
}

}  // namespace kernels::cpu
