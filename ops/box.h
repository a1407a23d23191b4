// Tensor-level box utilities for evaluation and inference (not differentiable; the training
// CIoU loss is a separate op): xywh <-> xyxy, element-wise IoU/GIoU/DIoU/CIoU, pairwise IoU.
// Inputs on any device are computed on the CPU twin and returned on the input's device.
#pragma once
#include "engine/tensor.h"
#include "kernels/common/box.h"

namespace ops {

using kernels::IouKind;

/// boxes [..., 4] cx, cy, w, h (any float dtype, any units) -> [..., 4] x1, y1, x2, y2 in the
/// same dtype. Source: utils/general.py xywh2xyxy. Throws ShapeError if the last dim is not 4.
engine::Tensor xywh2xyxy(const engine::Tensor& boxes);
/// boxes [..., 4] x1, y1, x2, y2 -> [..., 4] cx, cy, w, h (utils/general.py xyxy2xywh).
/// Throws ShapeError if the last dim is not 4.
engine::Tensor xyxy2xywh(const engine::Tensor& boxes);

/// Element-wise overlap of box1 [N, 4] and box2 [N, 4] (xywh when `xywh`, else xyxy; pixels or
/// any common unit) -> [N] F32. Computed in FP32 with the official operation order and eps=1e-7,
/// including the CIoU quirk that identical xywh boxes may give NaN.
/// Source: utils/metrics.py bbox_iou; GIoU (Rezatofighi et al., CVPR 2019), DIoU/CIoU (Zheng et
/// al., AAAI 2020). Throws ShapeError on shape mismatch. Deterministic.
engine::Tensor bbox_iou(const engine::Tensor& box1, const engine::Tensor& box2, bool xywh = true,
                        IouKind kind = IouKind::IoU);

/// Pairwise IoU matrix of a [N, 4] and b [M, 4] xyxy boxes -> [N, M] F32:
/// inter / (area_a + area_b - inter + 1e-7). Source: utils/metrics.py box_iou.
/// Throws ShapeError if either input is not [*, 4]. Deterministic.
engine::Tensor box_iou(const engine::Tensor& a, const engine::Tensor& b);

}  // namespace ops
