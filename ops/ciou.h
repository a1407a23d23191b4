// Differentiable Complete-IoU of box pairs (official utils/metrics.py bbox_iou, xywh=False,
// CIoU=True) with a hand-written backward.
#pragma once
#include "engine/tensor.h"

namespace ops {

/// CIoU of paired xyxy boxes: box1, box2 [..., 4] (same shape, dtype and device, any units; the
/// dtypes of the device's ciou entries: CPU and CUDA F32, F64)
/// -> [..., 1], like the official bbox_iou(box1, box2, xywh=False, CIoU=True, eps=1e-7):
/// eps on the heights, the union and c2; the aspect-ratio weight alpha is a constant in backward
/// (no_grad officially); min/max ties split the gradient evenly and clamp(0) passes it at 0
/// (PyTorch 1.13 conventions). Differentiable in both boxes.
/// Source: "Distance-IoU Loss: Faster and Better Learning for Bounding Box Regression"
/// (Zheng et al., AAAI 2020) eq. 10-12. Throws engine::ShapeError on shape/dtype/device mismatch
/// (NotSupportedError for a dtype/device without a kernel: CPU has F32, F64).
/// Deterministic (no reductions).
engine::Tensor ciou(const engine::Tensor& box1, const engine::Tensor& box2, double eps = 1e-7);

}  // namespace ops
