// Feature-map grids per stage (apps/training/features.h): official feature_visualization through
// the layer observer of graph::Model.
#include "apps/training/features.h"

#include <filesystem>

#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/model.h"
#include "io/augment.h"
#include "io/image.h"
#include "io/paths.h"
#include "io/plots.h"
#include "ops/nms.h"
#include "ops/ops.h"

namespace fs = std::filesystem;
using engine::Tensor;

namespace training {

namespace {

// The observer that writes one grid per stage (official feature_visualization).
graph::Model::LayerObserver grid_writer(const std::string& dir, int n, std::vector<std::string>* written) {
  return [dir, n, written](int64_t i, const graph::Block& layer, const std::vector<Tensor>& outs) {
    if (outs.empty()) return;
    const Tensor y = outs.size() == 1 ? outs[0] : ops::concat(outs, 1);
    if (y.dim() != 4 || y.size(2) <= 1 || y.size(3) <= 1) return;  // official: height > 1 and width > 1
    std::string type = layer.type_name();
    if (const size_t dot = type.rfind('.'); dot != std::string::npos) type = type.substr(dot + 1);  // m.type.split('.')[-1]
    const std::string f = (fs::path(dir) / ("stage" + std::to_string(i) + "_" + type + "_features.png")).string();
    io::plot_feature_maps(y, f, n);
    if (written) written->push_back(f);
  };
}

}  // namespace

std::vector<std::string> save_feature_maps(graph::Model& model, const Tensor& x, const std::string& dir, int n) {
  fs::create_directories(dir);
  std::vector<std::string> written;
  engine::autograd::NoGradGuard ng;
  model.forward(x, grid_writer(dir, n, &written));
  return written;
}

Predictor visualizing_predictor(graph::Model& model, const std::string& save_dir, int n) {
  model.eval();
  graph::Model* m = &model;
  return [m, save_dir, n](const Tensor& x, const io::Batch& batch) {
    const std::string stem = batch.paths.empty() ? std::string("image") : fs::path(batch.paths[0]).stem().string();
    const std::string dir = io::increment_path((fs::path(save_dir) / stem).string(), false, /*mkdir=*/true);
    engine::autograd::NoGradGuard ng;
    // One forward: the grids are written from the observer, the output goes to NMS.
    graph::ModelOutput out = m->forward(x, grid_writer(dir, n, nullptr));
    Y9_CHECK(!out.decoded.empty(), "visualizing_predictor: the model returned no decoded output (not in eval mode?)");
    if (out.decoded.size() <= 2) return ops::nms_input(out.decoded, out.decoded.size() > 1);
    return out.decoded.back();
  };
}

Tensor letterboxed_input(const std::string& image_path, int imgsz) {
  const cv::Mat im = io::read_image_bgr(image_path);
  const io::LetterboxResult lb = io::letterbox(im, imgsz, imgsz, /*auto_pad=*/false, false, /*scaleup=*/true, 32);
  const int H = lb.img.rows, W = lb.img.cols;
  Tensor t = Tensor::empty({1, 3, H, W}, engine::DType::F32);
  float* d = t.data<float>();
  for (int y = 0; y < H; ++y) {
    const uint8_t* s = lb.img.ptr<uint8_t>(y);
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c)  // BGR -> RGB planes
        d[(static_cast<int64_t>(c) * H + y) * W + x] = static_cast<float>(s[3 * x + 2 - c]) / 255.0f;
  }
  return t;
}

}  // namespace training
