// The validation pass of `yolov9 train`: run_validation with a predictor that also accumulates
// the val losses.
#include "apps/training/train_val.h"

#include "engine/autograd.h"
#include "ops/autocast.h"
#include "ops/nms.h"

namespace training {

TrainValResult validate_model(graph::Model& model, std::shared_ptr<const io::AugmentedDataset> ds,
                              const ops::YoloLossConfig& loss_cfg, const ValOptions& opts) {
  const bool was_training = model.training();
  model.eval();
  double lsum[3] = {0, 0, 0};
  int64_t nbatches = 0;
  const bool dual = model.head()->branches >= 2;
  Predictor predictor = [&](const engine::Tensor& x, const io::Batch& batch) {
    engine::autograd::NoGradGuard ng;
    graph::ModelOutput out;
    if (opts.autocast != engine::DType::F32) {
      {
        ops::AutocastGuard ac(opts.autocast);
        out = model.forward(x);
      }
      for (auto& branch : out.raw)
        for (auto& level : branch) level = level.to(engine::DType::F32);
      for (auto& d : out.decoded) d = d.to(engine::DType::F32);
    } else {
      out = model.forward(x);
    }
    const auto items = ops::yolo_loss(out.raw, batch.targets, loss_cfg).items.to_vector<double>();
    for (int k = 0; k < 3; ++k) lsum[k] += items[static_cast<size_t>(k)];
    ++nbatches;
    return ops::nms_input(out.decoded, dual);
  };
  ValResult vr;
  try {
    vr = run_validation(predictor, std::move(ds), opts);
  } catch (...) {
    if (was_training) model.train();
    throw;
  }
  if (was_training) model.train();
  TrainValResult res;
  res.p = vr.metrics.mp;
  res.r = vr.metrics.mr;
  res.map50 = vr.metrics.map50;
  res.map = vr.metrics.map;
  res.images = vr.seen;
  res.instances = vr.instances;
  res.batches = nbatches;
  if (nbatches > 0) {
    res.box = lsum[0] / static_cast<double>(nbatches);
    res.cls = lsum[1] / static_cast<double>(nbatches);
    res.dfl = lsum[2] / static_cast<double>(nbatches);
  }
  return res;
}

}  // namespace training
