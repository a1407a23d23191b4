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
}  // namespace

template <typename T>
void yolo_decode_cpu(const T* pred, const T* anc, const T* stride, int64_t B, int64_t A, int64_t nc, int reg,
                     T* scores, T* box_grid, T* box_px) {
  const int64_t no = 4 * reg + nc;
#pragma omp parallel for schedule(static) if (B * A > kParallelMin)
  for (int64_t i = 0; i < B * A; ++i) {
    const int64_t a = i % A;
    yolo_decode_one<T>(pred + i * no, anc[a * 2], anc[a * 2 + 1], stride[a], nc, reg, scores + i * nc,
                       box_grid + i * 4, box_px + i * 4);
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
      yolo_anchor_loss_add<T>(pred + i * no, box_grid + i * 4, anc[a * 2], anc[a * 2 + 1], stride[a],
                              target_bboxes + i * 4, target_scores + i * nc, fg[i], nc, reg, ts_sum, cls, box, dfl);
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
                                   int64_t B, int64_t A, int64_t nc, int reg, const T* grad_out, double branch_weight,
                                   const double* gains, int64_t loss_batch, T* grad_pred) {
  const int64_t no = 4 * reg + nc;
  const T inv = T(1) / *tss;
  T cb, cc, cd;
  yolo_loss_grad_coef<T>(grad_out, branch_weight, gains, static_cast<double>(loss_batch), inv, cb, cc, cd);
#pragma omp parallel for schedule(static) if (B * A > kParallelMin)
  for (int64_t i = 0; i < B * A; ++i) {
    const int64_t a = i % A;
    yolo_anchor_loss_grad<T>(pred + i * no, box_grid + i * 4, anc[a * 2], anc[a * 2 + 1], stride[a],
                             target_bboxes + i * 4, target_scores + i * nc, fg[i], nc, reg, cb, cc, cd,
                             grad_pred + i * no);
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
                    const void* tss, int64_t B, int64_t A, int64_t nc, int reg, const void* grad_out,
                    double branch_weight, const double* gains, int64_t loss_batch, void* grad_pred) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    yolo_branch_loss_backward_cpu<T>(static_cast<const T*>(pred), static_cast<const T*>(box_grid),
                                     static_cast<const T*>(anc), static_cast<const T*>(stride),
                                     static_cast<const T*>(target_bboxes), static_cast<const T*>(target_scores), fg,
                                     static_cast<const T*>(tss), B, A, nc, reg, static_cast<const T*>(grad_out),
                                     branch_weight, gains, loss_batch, static_cast<T*>(grad_pred));
  });
}

void finish_entry(DeviceContext&, DType dt, const double* sums, int64_t K, const double* branch_weights,
                  const double* gains, int64_t loss_batch, void* tss, void* out) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    yolo_loss_finish_one<T>(sums, K, branch_weights, gains, static_cast<double>(loss_batch), static_cast<T*>(tss),
                            static_cast<T*>(out));
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kYoloDecode, &decode_entry, engine::kF32F64);
  b.add(kYoloBranchLossForward, &forward_entry, engine::kF32F64);
  b.add(kYoloBranchLossBackward, &backward_entry, engine::kF32F64);
  b.add(kYoloLossFinish, &finish_entry, engine::kF32F64);
}

}  // namespace kernels::cpu
