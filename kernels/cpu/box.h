// CPU twins of the box utilities: batched xywh <-> xyxy conversion, element-wise bbox_iou
// (IoU/GIoU/DIoU/CIoU) and the pairwise box_iou matrix, on raw contiguous FP32 arrays.
// The scalar math lives in kernels/common/box.h so the CUDA kernels run the same formulas.
#pragma once
#include <cstdint>

#include "kernels/common/box.h"

namespace kernels::cpu {

/// out[n, 4] = xywh2xyxy(in[n, 4]); in and out may be the same buffer.
void xywh_to_xyxy_cpu(const float* in, float* out, int64_t n);
/// out[n, 4] = xyxy2xywh(in[n, 4]); in and out may be the same buffer.
void xyxy_to_xywh_cpu(const float* in, float* out, int64_t n);
/// out[i] = bbox_iou(box1[i], box2[i]) for i < n (boxes [n, 4], xywh or xyxy), official formula.
void bbox_iou_forward_cpu(const float* box1, const float* box2, float* out, int64_t n, bool xywh,
                          IouKind kind);
/// out[i, j] = box_iou(a[i], b[j]) for a [n, 4], b [m, 4] xyxy; out [n, m] row-major.
void box_iou_matrix_cpu(const float* a, int64_t n, const float* b, int64_t m, float* out);

}  // namespace kernels::cpu
