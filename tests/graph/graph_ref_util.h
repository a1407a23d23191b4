// Helpers shared by the graph fixture tests: JSON reading, fixture-relative comparison with a
// printed error figure, and numbered-output lookup ("out_train.0.1").
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <filesystem>
#include <memory>
#include <optional>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "graph/fuse.h"
#include "graph/model.h"
#include "graph/state.h"
#include "io/safetensors.h"
#include "tests/source_paths.h"
#include "tests/testutil.h"

namespace graphtest {

/// Sets the process-wide switches of the CPU's blocked layout for a scope and restores them after:
/// inference's (graph::set_blocked_inference) and training's (graph::set_blocked_training);
/// std::nullopt leaves one as it is.
class BlockedLayoutScope {
 public:
  BlockedLayoutScope(std::optional<bool> inference, std::optional<bool> training)
      : inference_(graph::blocked_inference()), training_(graph::blocked_training()) {
    if (inference) graph::set_blocked_inference(*inference);
    if (training) graph::set_blocked_training(*training);
  }
  ~BlockedLayoutScope() {
    graph::set_blocked_inference(inference_);
    graph::set_blocked_training(training_);
  }
  BlockedLayoutScope(const BlockedLayoutScope&) = delete;
  BlockedLayoutScope& operator=(const BlockedLayoutScope&) = delete;

 private:
  bool inference_, training_;
};

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

/// max |x| of a tensor (host copy; tests only).
inline double max_abs(const engine::Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

/// Largest |got - want| / max|want| (the error relative to the tensor's scale).
inline double scaled_error(const engine::Tensor& got, const engine::Tensor& want) {
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double e = 0, s = 0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    e = std::max(e, std::fabs(g[i] - w[i]));
    s = std::max(s, std::fabs(w[i]));
  }
  return s > 0 ? e / s : e;
}

/// Elementwise |got - want| <= rtol*|want| + atol_scale*max|want| (shapes must match; the
/// fixture may store a 0-d tensor as [1]).
inline ::testing::AssertionResult close(const engine::Tensor& got, const engine::Tensor& want, double rtol,
                                        double atol_scale) {
  if (got.numel() != want.numel())
    return ::testing::AssertionFailure() << "numel " << got.numel() << " vs " << want.numel();
  const engine::Tensor g = got.shape() == want.shape() ? got : got.reshape(want.shape());
  return testutil::all_close(g, want, rtol, atol_scale * max_abs(want));
}

/// Tensors named `prefix.0`, `prefix.1`, ... (or just `prefix`), in index order.
inline std::vector<std::string> numbered(const std::map<std::string, engine::Tensor>& ts, const std::string& prefix) {
  if (ts.count(prefix)) return {prefix};
  std::vector<std::string> out;
  for (int i = 0; ts.count(prefix + "." + std::to_string(i)); ++i) out.push_back(prefix + "." + std::to_string(i));
  return out;
}

/// The shipped config with the file name of an official config path ("models/detect/x.yaml").
inline std::string config_path(const std::string& official) {
  return testutil::source_file("configs/models/" + std::filesystem::path(official).filename().string());
}

/// A whole-model fixture (model_*.json): the model built from its cfg and nc with the fixture
/// weights loaded (left in training mode), the fixture tensors, the weight tensors (the same map
/// unless the JSON names a separate weights_file) and the load options used (weights_prefix,
/// default "state.", and the weights_key_map renames).
struct ModelFixture {
  std::shared_ptr<graph::Model> model;
  std::map<std::string, engine::Tensor> tensors, weights;
  graph::LoadOptions load;
};

inline ModelFixture load_model_fixture(const std::string& ref, const nlohmann::json& j) {
  ModelFixture f;
  f.model = graph::Model::from_yaml(config_path(j.at("cfg").get<std::string>()), j.at("nc").get<int64_t>());
  const std::string tfile = j.at("tensors_file").get<std::string>();
  const std::string wfile = j.value("weights_file", tfile);
  f.tensors = io::load_safetensors(ref + "/" + tfile).tensors;
  f.weights = wfile == tfile ? f.tensors : io::load_safetensors(ref + "/" + wfile).tensors;
  f.load.prefix = j.value("weights_prefix", std::string("state."));
  if (j.contains("weights_key_map"))
    for (const auto& [from, to] : j.at("weights_key_map").items()) f.load.rename.emplace_back(from, to.get<std::string>());
  graph::load_state_dict(*f.model, f.weights, f.load);
  return f;
}

/// A model built from `yaml` (a path) whose activations carry its input to the head, in eval mode,
/// fused when `fused`. A freshly initialised model's signal fades layer by layer (another input
/// moves gelan-t's raw maps by about 2e-7), so a wrong channel order or slice would go unseen;
/// here every BatchNorm2d first takes the statistics of one train-mode batch of 2 random images
/// of img x img (momentum 1, then back to its own), so it normalises its channels and the outputs
/// move by O(1) with the input.
inline std::shared_ptr<graph::Model> lively_model(const std::string& yaml, int64_t img, bool fused) {
  auto model = graph::Model::from_yaml(yaml);
  engine::autograd::NoGradGuard ng;
  std::vector<std::pair<graph::BatchNorm2d*, double>> bns;
  for (auto& [name, m] : model->named_modules())
    if (auto* bn = dynamic_cast<graph::BatchNorm2d*>(m)) bns.emplace_back(bn, bn->momentum);
  for (auto& [bn, momentum] : bns) bn->momentum = 1.0;
  model->train();
  model->forward(testutil::random_tensor({2, 3, img, img}, 13, 0, 1, engine::DType::F32));
  for (auto& [bn, momentum] : bns) bn->momentum = momentum;
  if (fused) graph::fuse(*model);
  model->eval();
  return model;
}

}  // namespace graphtest
