// The small validation pass of `yolov9 train` (val losses + NMS + mAP on the EMA model).
#include "apps/train_val.h"

#include <cstring>

#include "engine/autograd.h"
#include "ops/metrics.h"
#include "ops/nms.h"

namespace apps {

namespace {
// uint8 [B,3,H,W] -> float32 / 255 (official imgs.float() / 255: an FP32 division per element).
engine::Tensor to_unit_float(const engine::Tensor& u8) {
  engine::Tensor x = engine::Tensor::empty(u8.shape(), engine::DType::F32);
  const uint8_t* s = u8.contiguous().data<uint8_t>();
  float* d = x.data<float>();
  const int64_t n = u8.numel();
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]) / 255.0f;
  return x;
}
}  // namespace

TrainValResult validate_model(graph::Model& model, io::DataLoader& loader, const ops::YoloLossConfig& loss_cfg,
                              int64_t nc, bool single_cls) {
  engine::autograd::NoGradGuard ng;
  const bool was_training = model.training();
  model.eval();
  TrainValResult res;
  ops::DetectionMetrics metrics(nc);
  ops::NmsOptions nms_opt;
  nms_opt.conf_thres = 0.001;
  nms_opt.iou_thres = 0.7;
  nms_opt.multi_label = true;
  nms_opt.agnostic = single_cls;
  nms_opt.max_det = 300;
  const bool dual = model.head()->branches >= 2;
  double lsum[3] = {0, 0, 0};
  int64_t nbatches = 0;
  loader.start_epoch(0);
  io::Batch b;
  while (loader.next(b)) {
    engine::Tensor x = to_unit_float(b.images);
    graph::ModelOutput out = model.forward(x);
    ops::YoloLossResult lr = ops::yolo_loss(out.raw, b.targets, loss_cfg);
    const auto items = lr.items.to_vector<double>();
    for (int k = 0; k < 3; ++k) lsum[k] += items[static_cast<size_t>(k)];
    ++nbatches;
    const engine::Tensor& pred_in = ops::nms_input(out.decoded, dual);
    std::vector<engine::Tensor> preds = ops::non_max_suppression(pred_in, nms_opt);
    const int64_t B = x.size(0);
    const double H = static_cast<double>(x.size(2)), W = static_cast<double>(x.size(3));
    const auto t = b.targets.contiguous().to_vector<float>();  // [N, 6]
    const int64_t nt = b.targets.size(0);
    for (int64_t si = 0; si < B; ++si) {
      std::vector<float> lab;
      for (int64_t j = 0; j < nt; ++j) {
        const float* r = &t[static_cast<size_t>(j * 6)];
        if (static_cast<int64_t>(r[0]) != si) continue;
        const double cx = r[2] * W, cy = r[3] * H, w = r[4] * W, h = r[5] * H;
        lab.insert(lab.end(), {single_cls ? 0.0f : r[1], static_cast<float>(cx - w / 2),
                               static_cast<float>(cy - h / 2), static_cast<float>(cx + w / 2),
                               static_cast<float>(cy + h / 2)});
      }
      const int64_t m = static_cast<int64_t>(lab.size() / 5);
      res.instances += m;
      metrics.add_image(preds[static_cast<size_t>(si)], engine::Tensor::from_vector(lab, {m, 5}), single_cls);
    }
    res.images += B;
  }
  if (was_training) model.train();
  const ops::ValMetrics vm = metrics.compute();
  res.p = vm.mp;
  res.r = vm.mr;
  res.map50 = vm.map50;
  res.map = vm.map;
  if (nbatches > 0) {
    res.box = lsum[0] / static_cast<double>(nbatches);
    res.cls = lsum[1] / static_cast<double>(nbatches);
    res.dfl = lsum[2] / static_cast<double>(nbatches);
  }
  return res;
}

}  // namespace apps
