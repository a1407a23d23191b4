// Unit tests of the graph transforms and weight files: the PGI re-parameterisation mapping of
// every shipped yolov9/gelan pair against the notebook's table (spec model.md section 7),
// Conv+BN and RepConvN folding on blocks with random BN statistics, and safetensors weight
// save/load by official names (round trip, error naming the mismatched tensor and shapes).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "engine/autograd.h"
#include "engine/error.h"
#include "apps/training/weights.h"
#include "graph/fuse.h"
#include "graph/state.h"
#include "io/safetensors.h"
#include "tests/testutil.h"

namespace {

using engine::Tensor;

std::string cfg(const std::string& name) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + name; }

// Random BN statistics and affine parameters (non-trivial folding), seeded.
void randomise_bn(graph::Module& m, uint64_t seed) {
  engine::autograd::NoGradGuard ng;
  for (auto& [name, mod] : m.named_modules())
    if (auto* bn = dynamic_cast<graph::BatchNorm2d*>(mod)) {
      const engine::Shape s{bn->c};
      bn->weight.copy_(testutil::random_tensor(s, seed++, 0.5, 1.5));
      bn->bias.copy_(testutil::random_tensor(s, seed++, -0.5, 0.5));
      bn->running_mean.copy_(testutil::random_tensor(s, seed++, -0.5, 0.5));
      bn->running_var.copy_(testutil::random_tensor(s, seed++, 0.5, 2.0));
    }
}

std::map<std::string, std::string> as_map(const std::vector<std::pair<std::string, std::string>>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

TEST(PgiMapping, MatchesNotebookTable) {
  struct Case {
    const char* size;
    std::vector<std::pair<int, int>> trunk;  // [first, last] gelan layers with offset
    std::vector<int> offset;
    int gelan_head, dual_head;
  };
  const std::vector<Case> cases = {
      {"t", {{0, 21}}, {0}, 22, 29},
      {"s", {{0, 21}}, {0}, 22, 29},
      {"m", {{0, 21}}, {1}, 22, 38},
      {"c", {{0, 21}}, {1}, 22, 38},
      {"e", {{0, 28}, {29, 41}}, {0, 7}, 42, 49},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.size);
    const auto g = graph::load_model_config(cfg(std::string("gelan-") + c.size + ".yaml"));
    const auto d = graph::load_model_config(cfg(std::string("yolov9-") + c.size + ".yaml"));
    const auto mapping = graph::pgi_mapping(g, d);
    const auto mp = as_map(mapping);
    std::map<std::string, std::string> want;
    for (size_t r = 0; r < c.trunk.size(); ++r)
      for (int i = c.trunk[r].first; i <= c.trunk[r].second; ++i)
        want["model." + std::to_string(i) + "."] = "model." + std::to_string(i + c.offset[r]) + ".";
    const std::string gh = "model." + std::to_string(c.gelan_head) + ".", dh = "model." + std::to_string(c.dual_head) + ".";
    want[gh + "cv2."] = dh + "cv4.";
    want[gh + "cv3."] = dh + "cv5.";
    want[gh + "dfl."] = dh + "dfl2.";
    EXPECT_EQ(mp, want);
    // Head entries come first (they are longer prefixes of the head layer's names).
    EXPECT_EQ(mapping.front().first, gh + "cv2.");
    // Every state tensor of gelan maps to a dual tensor of the same shape.
    graph::BuildOptions bo;
    bo.init = false;
    graph::Model gm(g, bo), dm(d, bo);
    std::map<std::string, Tensor> src;
    for (auto& [n, t] : dm.state_dict()) src.emplace(n, t);
    graph::LoadOptions lo;
    lo.rename = mapping;
    EXPECT_NO_THROW(graph::load_state_dict(gm, src, lo));
  }
}

TEST(PgiMapping, UnmatchedLayerIsNamed) {
  const auto g = graph::load_model_config(cfg("gelan-s.yaml"));
  const auto d = graph::load_model_config(cfg("yolov9-t.yaml"));  // other widths
  try {
    graph::pgi_mapping(g, d);
    FAIL() << "expected ConfigError";
  } catch (const engine::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0"), std::string::npos) << e.what();
  }
}

TEST(Fusion, ConvAndRepConvNBlocks) {
  // RepNCSPELAN4 holds Conv and RepConvN (inside RepNBottleneck); SPPELAN / ADown plain Convs.
  graph::RepNCSPELAN4 block(16, 32, 32, 16, 2, graph::Act::SiLU);
  {
    engine::autograd::NoGradGuard ng;
    uint64_t seed = 100;
    for (auto& [n, p] : block.named_parameters())
      if (n.find("conv.weight") != std::string::npos) p.copy_(testutil::random_tensor(p.shape(), seed++, -0.3, 0.3));
  }
  randomise_bn(block, 7);
  block.eval();
  const Tensor x = testutil::random_tensor({2, 16, 12, 12}, 3, -1, 1, engine::DType::F32);
  engine::autograd::NoGradGuard ng;
  const Tensor before = block.forward(x);
  const int n = graph::fuse(block);
  // 1 cv1 + 2 x (RepNCSP: cv1, cv2, cv3, 2 x (RepConvN + cv2), Conv) + cv4 Convs, 4 RepConvN.
  EXPECT_EQ(n, 2 + 2 * (3 + 2 * 2 + 1));
  for (const auto& [name, t] : block.state_dict()) {
    EXPECT_EQ(name.find("bn."), std::string::npos) << name;
    EXPECT_EQ(name.find("conv1"), std::string::npos) << name;
  }
  // The fused RepConvN is one 3x3 conv with bias, named like the official fuse_convs result.
  const auto sd = block.state_dict();
  bool found = false;
  for (const auto& [name, t] : sd)
    if (name == "cv2.0.m.0.cv1.conv.weight") {
      found = true;
      EXPECT_EQ(t.shape(), (engine::Shape{8, 8, 3, 3}));
    }
  EXPECT_TRUE(found);
  const Tensor after = block.forward(x);
  EXPECT_TRUE(testutil::all_close(after, before, 1e-4, 1e-5));
  // The folded weights are frozen (the fused CPU conv keeps them reordered); a load thaws them.
  Tensor w = block.cv4->conv->weight;
  EXPECT_TRUE(w.storage()->frozen());
  int reps = 0;
  for (auto& [name, mod] : block.named_modules())
    if (auto* r = dynamic_cast<graph::RepConvN*>(mod)) {
      ++reps;
      EXPECT_TRUE(r->conv->weight.storage()->frozen()) << name;
    }
  EXPECT_EQ(reps, 4);
  EXPECT_EQ(block.forward(x).to_vector<float>(), after.to_vector<float>());
  w.copy_(w.clone());
  EXPECT_FALSE(w.storage()->frozen());
  EXPECT_EQ(block.forward(x).to_vector<float>(), after.to_vector<float>());
  EXPECT_EQ(graph::fuse(block), 0);  // idempotent
  EXPECT_TRUE(w.storage()->frozen());
}

TEST(Weights, SaveLoadRoundTripAndErrors) {
  const auto dir = std::filesystem::temp_directory_path() / ("y9_weights_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  graph::BuildOptions a_opts;
  a_opts.seed = 1;
  auto a = graph::Model::from_yaml(cfg("gelan-t.yaml"), 3, a_opts);
  randomise_bn(*a, 11);
  const std::string path = (dir / "a.safetensors").string();
  training::save_model_weights(*a, path);
  // num_batches_tracked is stored 0-d I64, names are the official ones.
  const auto data = io::load_safetensors(path);
  EXPECT_EQ(data.tensors.size(), a->state_dict().size());
  EXPECT_EQ(data.tensors.at("model.0.bn.num_batches_tracked").dtype(), engine::DType::I64);
  EXPECT_EQ(data.tensors.at("model.22.dfl.conv.weight").shape(), (engine::Shape{1, 16, 1, 1}));

  graph::BuildOptions b_opts;
  b_opts.seed = 2;
  auto b = graph::Model::from_yaml(cfg("gelan-t.yaml"), 3, b_opts);
  training::load_weights(*b, path);
  const auto sa = a->state_dict(), sb = b->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t k = 0; k < sa.size(); ++k) EXPECT_TRUE(testutil::all_close(sb[k].second, sa[k].second, 0, 0)) << sa[k].first;

  // Other nc: the first mismatched tensor is named with both shapes.
  auto c = graph::Model::from_yaml(cfg("gelan-t.yaml"), 5);
  try {
    training::load_weights(*c, path);
    FAIL() << "expected ShapeError";
  } catch (const engine::ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.22.cv3.0.2.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 64, 1, 1]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[5, 64, 1, 1]"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  // Another model: the first missing tensor is named.
  auto d = graph::Model::from_yaml(cfg("yolov9-t.yaml"), 3);
  try {
    training::load_weights(*d, path);
    FAIL() << "expected ShapeError";
  } catch (const engine::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'model.22."), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}
