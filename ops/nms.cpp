// Tensor-level NMS (see nms.h): validation, then the batched kernel entry of the prediction's
// device (kernels/common/nms.h: CPU twin image by image, or the CUDA launch sequence), or, with
// --save-hybrid labels, FP32 CPU staging and the per-image twin, outputs back on the device.
#include "ops/nms.h"

#include "engine/backend.h"
#include "kernels/common/nms.h"
#include "kernels/cpu/nms.h"

namespace ops {

using engine::DType;
using engine::Tensor;

std::vector<Tensor> non_max_suppression(const Tensor& prediction, const NmsOptions& opt,
                                        const std::vector<Tensor>& labels) {
  Y9_CHECK(opt.conf_thres >= 0 && opt.conf_thres <= 1, "non_max_suppression: invalid conf_thres ", opt.conf_thres,
           ", valid values are between 0.0 and 1.0");
  Y9_CHECK(opt.iou_thres >= 0 && opt.iou_thres <= 1, "non_max_suppression: invalid iou_thres ", opt.iou_thres,
           ", valid values are between 0.0 and 1.0");
  Y9_CHECK_SHAPE(prediction.dim() == 3 && prediction.size(1) > 4 + opt.nm,
                 "non_max_suppression: expected prediction [B, 4 + nc + nm, A] with nm=", opt.nm, ", got ",
                 prediction.str());
  const int64_t bs = prediction.size(0), nc = prediction.size(1) - 4 - opt.nm, na = prediction.size(2);
  Y9_CHECK_SHAPE(labels.empty() || static_cast<int64_t>(labels.size()) == bs,
                 "non_max_suppression: labels must be empty or one tensor per image, got ", labels.size(),
                 " for batch ", bs);
  kernels::NmsConfig cfg;
  cfg.conf_thres = static_cast<float>(opt.conf_thres);
  cfg.iou_thres = opt.iou_thres;
  cfg.multi_label = opt.multi_label;
  cfg.agnostic = opt.agnostic;
  cfg.max_det = opt.max_det;
  cfg.max_nms = opt.max_nms;
  cfg.max_wh = static_cast<float>(opt.max_wh);
  cfg.classes = opt.classes.empty() ? nullptr : opt.classes.data();
  cfg.n_classes = static_cast<int64_t>(opt.classes.size());

  bool has_labels = false;
  for (const Tensor& l : labels) has_labels |= l.defined() && l.numel() > 0;

  // Batched entry of the prediction's device: no labels (--save-hybrid stays on the host path).
  const engine::Device dev = prediction.device();
  if (!has_labels && engine::backend(dev.type).supports(kernels::kNmsBatched, DType::F32) &&
      (dev.is_cpu() || na * nc <= kernels::kNmsMaxPairs)) {
    Tensor pred = prediction.detach().to(DType::F32);  // on its device, any strides
    const kernels::NmsGeom g{bs, nc, opt.nm, na, {pred.stride(0), pred.stride(1), pred.stride(2)}};
    const int64_t cap = kernels::nms_capacity(g, cfg), width = 6 + opt.nm;
    std::vector<Tensor> out;
    out.reserve(static_cast<size_t>(bs));
    if (cap == 0) {  // max_det <= 0, max_nms <= 0 or no anchors: nothing to keep
      for (int64_t b = 0; b < bs; ++b) out.push_back(Tensor::empty({0, width}, DType::F32, dev));
      return out;
    }
    Tensor rows = Tensor::empty({bs, cap, width}, DType::F32, dev);
    Tensor counts = Tensor::empty({bs}, DType::I64, dev);
    auto k = engine::kernel(kernels::kNmsBatched, DType::F32, dev);
    k.fn(k.ctx, pred.data<float>(), g, cfg, cap, rows.data<float>(), counts.data<int64_t>());
    const std::vector<int64_t> n = counts.to_vector<int64_t>();  // the kept counts come back
    for (int64_t b = 0; b < bs; ++b) out.push_back(rows.select(0, b).slice(0, 0, n[static_cast<size_t>(b)]).clone());
    return out;
  }

  Tensor pred = prediction.detach().to(engine::Device::cpu()).to(DType::F32);  // any strides
  std::vector<Tensor> lab(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!labels[i].defined() || labels[i].numel() == 0) continue;
    Y9_CHECK_SHAPE(labels[i].dim() == 2 && labels[i].size(1) == 5,
                   "non_max_suppression: labels[", i, "] must be [n, 5] (cls, cx, cy, w, h), got ", labels[i].str());
    lab[i] = labels[i].detach().to(engine::Device::cpu()).to(DType::F32).contiguous();
  }

  std::vector<std::vector<float>> rows(static_cast<size_t>(bs));
  const float* base = pred.data<float>();
  const int64_t sb = pred.stride(0), sc = pred.stride(1), sa = pred.stride(2);
#pragma omp parallel for schedule(dynamic) if (bs > 1)
  for (int64_t b = 0; b < bs; ++b) {
    const Tensor& l = lab.empty() ? Tensor() : lab[b];
    const bool has = l.defined();
    kernels::cpu::non_max_suppression_image_cpu(base + b * sb, sc, sa, nc, opt.nm, na, has ? l.data<float>() : nullptr,
                                                has ? l.size(0) : 0, cfg, rows[b]);
  }
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(bs));
  const int64_t width = 6 + opt.nm;
  for (int64_t b = 0; b < bs; ++b) {
    const int64_t n = static_cast<int64_t>(rows[b].size()) / width;
    out.push_back(Tensor::from_vector<float>(rows[b], {n, width}).to(prediction.device()));
  }
  return out;
}

void scale_boxes_round_(Tensor& det, double gain, double pad_w, double pad_h, int h0, int w0) {
  Y9_CHECK_SHAPE(det.dim() == 2 && det.size(1) >= 4 && det.dtype() == DType::F32 && det.is_contiguous(),
                 "scale_boxes_round_: need contiguous F32 [n, >= 4], got ", det.str());
  if (det.size(0) == 0) return;
  kernels::ScaleBoxesParams p;
  p.gain = gain;
  p.pad_w = pad_w;
  p.pad_h = pad_h;
  p.w0 = w0;
  p.h0 = h0;
  auto k = engine::kernel(kernels::kScaleBoxes, DType::F32, det.device());
  k.fn(k.ctx, det.data<float>(), det.size(0), det.size(1), p);
}

Tensor nms(const Tensor& boxes, const Tensor& scores, double iou_thres) {
  Y9_CHECK_SHAPE(boxes.dim() == 2 && boxes.size(1) == 4 && scores.dim() == 1 && scores.size(0) == boxes.size(0),
                 "nms: expected boxes [N, 4] and scores [N], got ", boxes.str(), " and ", scores.str());
  Tensor b = boxes.detach().to(engine::Device::cpu()).to(DType::F32).contiguous();
  Tensor s = scores.detach().to(engine::Device::cpu()).to(DType::F32).contiguous();
  std::vector<int64_t> keep(static_cast<size_t>(b.size(0)));
  const int64_t k = kernels::cpu::nms_greedy_cpu(b.data<float>(), s.data<float>(), b.size(0), iou_thres, keep.data());
  keep.resize(static_cast<size_t>(k));
  return Tensor::from_vector<int64_t>(keep, {k}).to(boxes.device());
}

const Tensor& nms_input(const std::vector<Tensor>& outputs, bool dual) {
  Y9_CHECK(outputs.size() >= (dual ? 2u : 1u), "nms_input: expected ", dual ? 2 : 1, " head outputs, got ",
           outputs.size());
  return outputs[dual ? 1 : 0];
}

}  // namespace ops
