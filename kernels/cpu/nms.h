// CPU twin of the official YOLOv9 non_max_suppression (utils/general.py) for one image, and the
// greedy torchvision.ops.nms it calls. Raw pointers in, std::vector scratch only (no tensors).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/common/nms.h"

namespace kernels::cpu {

/// Settings of one call (kernels/common/nms.h).
using NmsConfig = kernels::NmsConfig;

/// Greedy NMS with torchvision.ops.nms semantics: order by score descending (stable), keep a
/// box unless its IoU (inter / (area_i + area_j - inter), xyxy, FP32) with an already kept box
/// is > iou_thres. boxes [n, 4] xyxy, scores [n]. Writes kept indices (decreasing score) into
/// `keep` (capacity n) and returns their count; stops after `max_keep` kept boxes (the first
/// max_keep kept boxes do not depend on later ones, so this equals truncating the full result).
int64_t nms_greedy_cpu(const float* boxes, const float* scores, int64_t n, double iou_thres, int64_t* keep,
                       int64_t max_keep = INT64_MAX);

/// Official non_max_suppression for one image.
/// pred: element (c, a) at pred[c * stride_c + a * stride_a], c < 4 + nc + nm, a < anchors; rows
///   0-3 = cx, cy, w, h (pixels), 4..4+nc = class scores, then nm mask coefficients.
/// labels: optional [n_labels, 5] rows (cls, cx, cy, w, h) appended as score-1.0 candidates
///   (--save-hybrid); may be nullptr.
/// out: receives rows of 6 + nm floats [x1, y1, x2, y2, conf, cls, masks...] in NMS order.
void non_max_suppression_image_cpu(const float* pred, int64_t stride_c, int64_t stride_a, int64_t nc, int64_t nm,
                                   int64_t anchors, const float* labels, int64_t n_labels, const NmsConfig& cfg,
                                   std::vector<float>& out);

}  // namespace kernels::cpu
