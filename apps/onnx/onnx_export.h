// ONNX export of an inference model: walks the module graph of a built graph::Model (fused,
// single-branch, eval mode) and emits the equivalent ONNX graph with ONNX's protobuf schema
// (onnx-ml.proto from Debian's libonnx-dev), optionally with NMS inside (EfficientNMS-style
// outputs). The library y9_onnx sits beside the apps: only the `yolov9` program links it, the
// engine and training layers never see protobuf. Writing the bytes to disk is left to io/.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graph/model.h"

namespace onnx_export {

/// Options of export_onnx; the defaults are those of the official export.py (opset 17 here,
/// the NMS thresholds of its end2end path: topk_all 100, iou 0.45, conf 0.25).
struct OnnxOptions {
  int64_t opset = 17;            ///< ai.onnx opset, 13..19 (Softmax on one axis and input-axes Squeeze need 13)
  int64_t batch = 1;             ///< static batch size of "images" (ignored with dynamic)
  int64_t img_h = 640;           ///< static input height in px, a multiple of the model's grid stride
  int64_t img_w = 640;           ///< static input width in px, a multiple of the model's grid stride
  bool dynamic = false;          ///< batch, height, width as dim_params; anchors computed in the graph
  bool half = false;             ///< FP16 initializers, input and float outputs (the graph computes in FP16)
  bool nms = false;              ///< NonMaxSuppression inside, EfficientNMS-style outputs
  int64_t topk_all = 100;        ///< --nms: detections kept per image (K)
  double iou_thres = 0.45;       ///< --nms: suppress when IoU > iou_thres
  double conf_thres = 0.25;      ///< --nms: keep a box when its best class score > conf_thres
  std::string producer_version;  ///< written as producer_version ("yolov9-cpp <version>")
};

/// One graph input or output as written: name, element type ("float32", "float16", "int32") and
/// dims (a dim_param name for a dynamic dimension).
struct OnnxValueInfo {
  std::string name, dtype;
  std::vector<std::string> dims;
};

/// What export_onnx produced.
struct OnnxModelBytes {
  std::string bytes;                   ///< the serialized onnx::ModelProto
  std::vector<OnnxValueInfo> inputs;   ///< "images"
  std::vector<OnnxValueInfo> outputs;  ///< "output0", or num_dets, boxes, scores, classes with nms
  int64_t nodes = 0, initializers = 0;
  int64_t topk = 0;  ///< K actually used with nms (min(topk_all, A) for a static graph)
};

/// Emits the ONNX graph of `model`'s eval forward (graph/forward.cpp) for an input
/// "images" [B, ch_in, H, W] (float32, or float16 with half; RGB in [0, 1], NCHW) and returns the
/// serialized ModelProto.
///
/// Outputs without nms: "output0" [B, 4 + nc, A] (cx, cy, w, h in input pixels, then sigmoid
/// class scores; A = sum over levels of H/s * W/s), equal to Model::forward(x).decoded[0] up to
/// float rounding: the same op sequence (Conv with bias, SiLU as Sigmoid*Mul, Slice for chunk and
/// split, Concat, MaxPool, AveragePool, nearest Resize, Add; DFL as Reshape, Transpose, Softmax
/// and the fixed 1x1 Conv; dist2bbox with the anchor grid as an initializer and per-level scalar
/// strides, or both computed from the feature-map shapes with dynamic).
/// Outputs with nms (the official non_max_suppression with agnostic=False, multi_label=False:
/// best class per box, class-offset boxes, ONNX NonMaxSuppression, then the top K by score):
///   num_dets [B, 1] int32; boxes [B, K, 4] x1, y1, x2, y2 in input pixels; scores [B, K];
///   classes [B, K] int32. Rows past num_dets are zero; rows are in descending score order.
///   A static graph uses K = min(topk_all, A); a dynamic one needs A >= topk_all at run time.
/// A model with a multi-branch head (DualDDetect) exports its main (last) branch only, like
/// ops::nms_input; re-parameterise it first (graph::reparameterize) to drop the unused trunk.
///
/// Preconditions: every Conv and RepConvN fused (graph::fuse); parameters F32 on the CPU.
/// Errors: engine::ConfigError on unfused modules, a bad opset, a non-positive size or batch, or
/// sides not multiples of the grid stride; engine::InternalError on a module type it does not
/// know. Deterministic: the same model and options give the same bytes.
/// Source: official export.py export_onnx (input "images", output "output0") and its end2end
/// NMS (models/experimental.py ONNX_ORT / ONNX_TRT) for the output names.
OnnxModelBytes export_onnx(const graph::Model& model, const OnnxOptions& opt);

/// "name dtype [d0, d1, ...]" for logs and --help text.
std::string describe(const OnnxValueInfo& v);

}  // namespace onnx_export
