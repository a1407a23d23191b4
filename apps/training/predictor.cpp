// model_predictor and check_img_size (apps/training/evaluator.h): the eval-mode, no-grad forward
// and the image-size rule that val, detect and the embedded inference build share. Their own file
// so that the inference build (Y9_INFERENCE_ONLY) compiles them without the validation loop.
#include "apps/training/predictor.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "engine/autograd.h"
#include "engine/cpu_cache.h"
#include "engine/error.h"
#include "graph/model.h"
#include "ops/autocast.h"
#include "ops/nms.h"
#include "ops/ops.h"

namespace training {

using engine::Tensor;

Predictor model_predictor(graph::Model& model, engine::DType autocast) {
  model.eval();
  graph::Model* m = &model;
  // The inference arena: the CPU blocks a pass frees are kept for the next pass while the
  // predictor (any copy of it) lives, so steady-state passes allocate nothing from the system.
  auto arena = std::make_shared<engine::CpuCacheScope>();
  return [m, autocast, arena](const Tensor& x, const io::Batch&) {
    engine::autograd::NoGradGuard ng;
    graph::ModelOutput out;
    if (autocast != engine::DType::F32) {
      ops::AutocastGuard ac(autocast);
      out = m->forward(x);
    } else {
      out = m->forward(x);
    }
    Y9_CHECK(!out.decoded.empty(), "model_predictor: the model returned no decoded output (not in eval mode?)");
    const Tensor& y = out.decoded.size() <= 2 ? ops::nms_input(out.decoded, out.decoded.size() > 1) : out.decoded.back();
    return y.dtype() == engine::DType::F32 ? y : y.to(engine::DType::F32);
  };
}

int check_img_size(int img, int stride, int floor) {
  const int v = std::max((img + stride - 1) / stride * stride, floor);
  if (v != img)
    std::printf("WARNING ⚠️ --img-size %d must be multiple of max stride %d, updating to %d\n", img, stride, v);
  return v;
}

}  // namespace training
