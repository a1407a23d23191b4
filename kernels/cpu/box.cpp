// CPU twins of the box utilities (see box.h); loops over the shared scalar math in
// kernels/common/box.h, threaded with OpenMP for large inputs.
#include "kernels/cpu/box.h"

namespace kernels::cpu {

void xywh_to_xyxy_cpu(const float* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) xywh_to_xyxy(in + 4 * i, out + 4 * i);
}

void xyxy_to_xywh_cpu(const float* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) xyxy_to_xywh(in + 4 * i, out + 4 * i);
}

void bbox_iou_forward_cpu(const float* box1, const float* box2, float* out, int64_t n, bool xywh,
                          IouKind kind) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) out[i] = bbox_iou(box1 + 4 * i, box2 + 4 * i, xywh, kind);
}

void box_iou_matrix_cpu(const float* a, int64_t n, const float* b, int64_t m, float* out) {
#pragma omp parallel for schedule(static) if (n * m > 65536)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) out[i * m + j] = box_iou_xyxy(a + 4 * i, b + 4 * j);
}

}  // namespace kernels::cpu
