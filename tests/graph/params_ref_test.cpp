// Parameter counts, GFLOPs, module counts and state_dict names/shapes of our model graph against
// the official fixtures: every model of params.json (configs/models/<name>) and every
// model_*.json whole-model fixture (state.* tensor names and shapes in the safetensors header).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/error.h"
#include "graph/model.h"
#include "tests/testutil.h"

namespace {

std::string config_path(const std::string& file) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + file; }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

// The safetensors header: name -> (shape, begin offset); "__metadata__" dropped.
std::map<std::string, std::pair<std::vector<int64_t>, int64_t>> safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  auto j = nlohmann::json::parse(text);
  std::map<std::string, std::pair<std::vector<int64_t>, int64_t>> out;
  for (auto& [k, v] : j.items()) {
    if (k == "__metadata__") continue;
    out[k] = {v["shape"].get<std::vector<int64_t>>(), v["data_offsets"][0].get<int64_t>()};
  }
  return out;
}

// Legacy models of params.json whose modules (MP, SPPCSPC, Detect) are outside the spec.
const std::set<std::string> kLegacy = {"yolov7-af.yaml"};

// Checks every model of a params.json (fixture README: "read shapes, seeds and settings from each
// JSON"): the image size is the file's "imgsz" and the GFLOPs key is "gflops_<imgsz>". Returns the
// number of models checked.
int check_params_json(const nlohmann::json& j) {
  const int64_t nc = j.at("nc").get<int64_t>();
  const int64_t img = j.at("imgsz").get<int64_t>();
  const std::string gflops_key = "gflops_" + std::to_string(img);
  int checked = 0;
  for (const auto& [name, v] : j.at("models").items()) {
    SCOPED_TRACE(name);
    const std::string path = config_path(name);
    if (!std::filesystem::exists(path)) {
      EXPECT_TRUE(kLegacy.count(name)) << "no config for " << name << " in configs/models";
      continue;
    }
    graph::BuildOptions opts;
    opts.init = false;
    auto m = graph::Model::from_yaml(path, nc, opts);
    EXPECT_EQ(m->num_parameters(), v.at("parameters").get<int64_t>());
    EXPECT_EQ(m->num_trainable(), v.at("trainable").get<int64_t>());
    EXPECT_EQ(m->num_buffer_elements(), v.at("buffers").get<int64_t>());
    EXPECT_EQ(m->num_modules_official(), v.at("modules").get<int64_t>());
    if (!v.contains(gflops_key)) {
      ADD_FAILURE() << name << ": no \"" << gflops_key << "\" for the file's imgsz " << img;
      continue;
    }
    const double gf = m->gflops(img, img), want = v.at(gflops_key).get<double>();
    EXPECT_NEAR(gf, want, 0.01 * want);
    EXPECT_NEAR(gf, want, 1e-6 * want) << "analytic MACs should equal the hook count exactly";
    const auto strides = v.at("strides").get<std::vector<double>>();
    EXPECT_EQ(m->strides(), strides);
    EXPECT_EQ(m->head()->type_name(), v.at("head").get<std::string>());
    ++checked;
  }
  return checked;
}

}  // namespace

TEST(ModelParamsRef, EveryParamsJsonModel) {
  const std::string ref = testutil::reference_dir();
  if (ref.empty()) GTEST_SKIP() << "no reference folder";
  EXPECT_GE(check_params_json(read_json(ref + "/params.json")), 10);
}

// A params.json at another image size (as a second fixture set writes it): the shipped file
// rewritten for imgsz 320, its "gflops_640" replaced by "gflops_320" = gflops_640 / 4 (every
// conv output shrinks by exactly 4 when all sides stay multiples of 32).
TEST(ModelParamsRef, GflopsKeyFollowsTheFilesImgsz) {
  const std::string ref = testutil::reference_dir();
  if (ref.empty()) GTEST_SKIP() << "no reference folder";
  auto j = read_json(ref + "/params.json");
  const int64_t img = j.at("imgsz").get<int64_t>();
  const std::string from = "gflops_" + std::to_string(img);
  j["imgsz"] = 320;
  nlohmann::json models;
  int n = 0;
  for (auto& [name, v] : j.at("models").items()) {
    if (n >= 2 || !std::filesystem::exists(config_path(name))) continue;  // two models keep it quick
    nlohmann::json w = v;
    ASSERT_TRUE(w.contains(from)) << name;
    const double s = 320.0 / static_cast<double>(img);
    w["gflops_320"] = w.at(from).get<double>() * s * s;
    w.erase(from);
    models[name] = w;
    ++n;
  }
  j["models"] = models;
  EXPECT_EQ(check_params_json(j), 2);
}
TEST(ModelParamsRef, StateDictNamesAndShapesMatchModelFixtures) {
  const std::string ref = testutil::reference_dir();
  if (ref.empty()) GTEST_SKIP() << "no reference folder";
  const auto files = testutil::glob_files(ref, "model_*.json");
  ASSERT_FALSE(files.empty());
  for (const auto& jf : files) {
    SCOPED_TRACE(jf);
    const auto j = read_json(jf);
    const std::string cfg = std::filesystem::path(j["cfg"].get<std::string>()).filename().string();
    const int64_t nc = j["nc"].get<int64_t>();
    graph::BuildOptions opts;
    opts.init = false;
    auto m = graph::Model::from_yaml(config_path(cfg), nc, opts);
    const std::string weights = j.contains("weights_file") ? j["weights_file"].get<std::string>()
                                                           : j["tensors_file"].get<std::string>();
    const std::string prefix = j.contains("weights_prefix") ? j["weights_prefix"].get<std::string>() : "state.";
    std::map<std::string, std::string> key_map;  // our prefix -> fixture prefix
    if (j.contains("weights_key_map")) key_map = j["weights_key_map"].get<std::map<std::string, std::string>>();
    const auto header = safetensors_header(ref + "/" + weights);
    auto fixture_name = [&](const std::string& ours) {
      for (const auto& [from, to] : key_map)
        if (ours.rfind(from, 0) == 0) return prefix + to + ours.substr(from.size());
      return prefix + ours;
    };
    const auto sd = m->state_dict();
    std::vector<std::pair<int64_t, std::string>> order;  // fixture offsets in our order
    for (const auto& [name, t] : sd) {
      auto it = header.find(fixture_name(name));
      if (it == header.end()) {
        ADD_FAILURE() << "fixture has no tensor for " << name;
        continue;
      }
      // The fixture writer stores PyTorch's 0-d num_batches_tracked as shape [1].
      const engine::Shape want = it->second.first == engine::Shape{1} && t.dim() == 0 ? engine::Shape{} : it->second.first;
      EXPECT_EQ(t.shape(), want) << name;
      order.emplace_back(it->second.second, name);
    }
    if (key_map.empty()) {
      // Same count, and the fixture stores tensors in state_dict order (increasing offsets).
      size_t n_state = 0;
      for (const auto& [k, v] : header) n_state += k.rfind(prefix, 0) == 0;
      EXPECT_EQ(n_state, sd.size());
      EXPECT_TRUE(std::is_sorted(order.begin(), order.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; }))
          << "state_dict order differs from the official one";
    }
    EXPECT_EQ(m->strides(), j["strides"].get<std::vector<double>>());
  }
}
