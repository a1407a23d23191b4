// Tensor-level non-maximum suppression for validation and inference: the official YOLOv9
// non_max_suppression (utils/general.py) and the choice of which head output feeds it.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace ops {

/// Options of non_max_suppression; defaults are the official function defaults. val uses
/// conf 0.001, iou 0.7, multi_label true, agnostic = single_cls; detect uses conf 0.25, iou 0.45,
/// multi_label false, max_det 1000 (shared/spec/eval.md section 5-6).
struct NmsOptions {
  double conf_thres = 0.25;        ///< keep scores > conf_thres (compared after rounding to FP32)
  double iou_thres = 0.45;         ///< suppress when IoU > iou_thres
  std::vector<int64_t> classes;    ///< class filter; empty = all classes
  bool agnostic = false;           ///< class-agnostic NMS (no class offset)
  bool multi_label = false;        ///< one detection per (box, class) pair above conf_thres
  int64_t max_det = 300;           ///< detections kept per image
  int64_t nm = 0;                  ///< number of mask coefficients after the class scores
  int64_t max_nms = 30000;         ///< official constant: boxes into NMS
  double max_wh = 7680.0;          ///< official constant: class offset in pixels
};

/// Official non_max_suppression on prediction [B, 4 + nc + nm, A] (rows cx, cy, w, h in
/// letterboxed-input pixels, then per-class sigmoid scores, then nm mask coefficients; any
/// float dtype, any device, any strides; converted to F32 on its device first).
/// labels: optional per-image [n_i, 5] (cls, cx, cy, w, h in pixels) ground truth appended as
///   score-1.0 candidates (--save-hybrid); empty vector = none, otherwise one tensor per image.
/// Returns B tensors [n_b, 6 + nm] F32 on the prediction's device: x1, y1, x2, y2 (unshifted,
/// pixels), conf, class index (as float), masks; rows in NMS keep order (descending conf).
/// Where it runs: without labels, on the prediction's device through the backend entry
/// kernels::kNmsBatched (kernels/common/nms.h): the CPU twin image by image (in parallel), or on
/// CUDA one launch sequence for the whole batch (candidates, sort, IoU bit mask, greedy pass;
/// kernels/cuda/nms.cu) that synchronises once (the candidate totals) and reads back only the B
/// kept counts, never one round trip per image; the kept rows stay on the device. The CUDA rows
/// equal the CPU rows bitwise (same boxes, scores, order, counts). With --save-hybrid labels, and
/// on CUDA when anchors * nc > 2^32 - 1, the prediction is staged to the CPU and the twin runs
/// there (results copied back to the device).
/// Deviations: the official 2.5 + 0.05 B second time limit (which drops the remaining images) is
/// not applied; ties in confidence keep their candidate order (stable sort; the official
/// argsort leaves them unspecified). In the official code --save-hybrid fails on a column
/// count mismatch; here label rows carry score 1.0 at their class as the spec describes.
/// Throws ShapeError on a bad prediction shape or label list; engine::Error on bad thresholds;
/// on CUDA, engine::OutOfMemoryError when the scratch (sort keys, B x 30000^2 / 8 bytes of IoU
/// mask at most 1 GiB per launch chunk) does not fit.
/// Source: utils/general.py non_max_suppression (WongKinYiu/yolov9 5b1ea9a); greedy NMS as
/// torchvision.ops.nms, its CUDA kernel's 64-box IoU bit mask (torchvision/csrc/ops/cuda/nms_kernel.cu).
/// Deterministic on every device.
std::vector<engine::Tensor> non_max_suppression(const engine::Tensor& prediction, const NmsOptions& opt = {},
                                                const std::vector<engine::Tensor>& labels = {});

/// detect's letterbox undo, in place on `det` [n, >= 4] (F32, contiguous; x1 y1 x2 y2 first, in
/// pixels of the letterboxed input), on its device (kernels::kScaleBoxes, bitwise the same on
/// every backend): (v - pad) / gain in double, clamped to [0, w0] (x) or [0, h0] (y), rounded to
/// FP32 and then to an integer, half to even. gain, pad_w, pad_h are the letterbox's ratio and half
/// paddings (pixels), h0 x w0 the original image size.
/// Source: utils/general.py scale_boxes + clip_boxes and detect_dual.py's .round() (WongKinYiu/yolov9
/// 5b1ea9a). Throws ShapeError on another dtype, layout or shape.
void scale_boxes_round_(engine::Tensor& det, double gain, double pad_w, double pad_h, int h0, int w0);

/// Greedy NMS as torchvision.ops.nms: boxes [N, 4] xyxy, scores [N] -> kept indices [K] I64 in
/// decreasing score order; a box is dropped if its IoU with a kept box is > iou_thres.
/// Throws ShapeError on bad shapes. Deterministic (stable order on equal scores).
engine::Tensor nms(const engine::Tensor& boxes, const engine::Tensor& scores, double iou_thres);

/// The head output that goes to NMS (spec eval.md section 1): for dual-head models
/// (DualDDetect: outputs [y1 auxiliary, y2 main]) the main-branch y2 = outputs[1]
/// (val_dual.py `preds[0][1]`); for single-head models (DDetect) the only y = outputs[0].
/// Throws engine::Error when `outputs` is too short.
const engine::Tensor& nms_input(const std::vector<engine::Tensor>& outputs, bool dual);

}  // namespace ops
