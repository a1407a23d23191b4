// Tensor-level box utilities (see box.h): validation, FP32 CPU staging, dispatch to kernels/cpu/box.
#include "ops/box.h"

#include "kernels/cpu/box.h"

namespace ops {

using engine::DType;
using engine::Tensor;

namespace {
/// Contiguous FP32 CPU copy (or the tensor itself when it already is one).
Tensor cpu_f32(const Tensor& t) { return t.detach().to(engine::Device::cpu()).to(DType::F32).contiguous(); }

void check_boxes(const Tensor& t, const char* what) {
  Y9_CHECK_SHAPE(t.dim() >= 1 && t.size(-1) == 4, what, ": expected boxes [..., 4], got ", t.str());
}

Tensor convert(const Tensor& boxes, bool to_xyxy) {
  check_boxes(boxes, to_xyxy ? "xywh2xyxy" : "xyxy2xywh");
  Tensor in = cpu_f32(boxes);
  Tensor out = Tensor::empty(in.shape(), DType::F32);
  const int64_t n = in.numel() / 4;
  if (to_xyxy) kernels::cpu::xywh_to_xyxy_cpu(in.data<float>(), out.data<float>(), n);
  else kernels::cpu::xyxy_to_xywh_cpu(in.data<float>(), out.data<float>(), n);
  return out.to(boxes.dtype()).to(boxes.device());
}
}  // namespace

Tensor xywh2xyxy(const Tensor& boxes) { return convert(boxes, true); }
Tensor xyxy2xywh(const Tensor& boxes) { return convert(boxes, false); }

Tensor bbox_iou(const Tensor& box1, const Tensor& box2, bool xywh, IouKind kind) {
  Y9_CHECK_SHAPE(box1.dim() == 2 && box1.size(1) == 4 && box1.shape() == box2.shape(),
                 "bbox_iou: expected box1 and box2 [N, 4], got ", box1.str(), " and ", box2.str());
  Tensor a = cpu_f32(box1), b = cpu_f32(box2);
  Tensor out = Tensor::empty({a.size(0)}, DType::F32);
  kernels::cpu::bbox_iou_forward_cpu(a.data<float>(), b.data<float>(), out.data<float>(), a.size(0), xywh, kind);
  return out.to(box1.device());
}

Tensor box_iou(const Tensor& a, const Tensor& b) {
  Y9_CHECK_SHAPE(a.dim() == 2 && a.size(1) == 4 && b.dim() == 2 && b.size(1) == 4,
                 "box_iou: expected a [N, 4] and b [M, 4], got ", a.str(), " and ", b.str());
  Tensor ca = cpu_f32(a), cb = cpu_f32(b);
  Tensor out = Tensor::empty({ca.size(0), cb.size(0)}, DType::F32);
  kernels::cpu::box_iou_matrix_cpu(ca.data<float>(), ca.size(0), cb.data<float>(), cb.size(0), out.data<float>());
  return out.to(a.device());
}

}  // namespace ops
