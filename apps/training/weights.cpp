// Model weights in safetensors files, and checkpoint -> graph::Model for val/detect
// (apps/training/weights.h).
#include "apps/training/weights.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/training/config_paths.h"
#include "engine/error.h"
#include "graph/fuse.h"
#include "graph/state.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace training {

void load_weights(graph::Module& m, const std::string& path, const graph::LoadOptions& opts) {
  auto data = io::load_weights_file(path);  // safetensors or an official .pt
  try {
    graph::load_state_dict(m, data.tensors, opts);
  } catch (const engine::ShapeError& e) {
    Y9_THROW(engine::ShapeError, path, ": ", e.message());
  }
}

void save_weights(const graph::Module& m, const std::string& path, const std::map<std::string, std::string>& metadata) {
  std::map<std::string, engine::Tensor> out;
  for (const auto& [name, t] : m.state_dict()) out.emplace(name, t.detach());
  io::save_safetensors(path, out, metadata);
}

void save_model_weights(const graph::Model& m, const std::string& path) {
  save_weights(m, path,
               {{"format", "yolov9-cpp state_dict"}, {"cfg", m.config().source}, {"nc", std::to_string(m.config().nc)}});
}

int64_t weights_meta_nc(const std::map<std::string, std::string>& meta, const std::string& weights) {
  auto it = meta.find("nc");
  if (it == meta.end()) return -1;
  int64_t nc = 0;
  const std::string& v = it->second;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), nc);
  Y9_CHECK_T(engine::ConfigError, ec == std::errc() && p == v.data() + v.size() && nc >= 1 && nc <= graph::kMaxClasses, weights,
             ": metadata 'nc' must be a class count in 1..", graph::kMaxClasses, ", got '", v.substr(0, 40), "'");
  return nc;
}

ModelYaml weights_model_yaml(const std::map<std::string, std::string>& meta, const std::string& weights,
                             const std::string& cfg) {
  auto read = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    Y9_CHECK_T(engine::IoError, f.good(), "model config ", path, ": cannot read");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  ModelYaml y;
  if (!cfg.empty()) {
    y.name = resolve_config(cfg, "models", "model config (--cfg)");
    y.stem = fs::path(y.name).stem().string();
    y.text = read(y.name);
    return y;
  }
  auto path = meta.find("cfg");
  const std::string original = path != meta.end() ? path->second : std::string();
  if (auto it = meta.find("cfg_yaml"); it != meta.end() && !it->second.empty()) {
    y.name = weights + " (embedded model YAML" + (original.empty() ? "" : " " + original) + ")";
    y.stem = original.empty() ? fs::path(weights).stem().string() : fs::path(original).stem().string();
    y.text = it->second;
    return y;
  }
  Y9_CHECK_T(engine::ConfigError, !original.empty(), weights,
             ": no model config in the file's metadata (no cfg_yaml or cfg); give --cfg");
  y.name = resolve_config(original, "models", "model config (the weights' metadata cfg)");
  y.stem = fs::path(y.name).stem().string();
  y.text = read(y.name);
  return y;
}

LoadedModel load_model(const std::string& weights, const std::string& cfg, int64_t nc_fallback, bool fuse) {
  io::SafetensorsData data = io::load_weights_file(weights);  // safetensors or an official .pt
  LoadedModel lm;
  const auto& meta = data.metadata;
  const ModelYaml yaml = weights_model_yaml(meta, weights, cfg);
  int64_t nc = weights_meta_nc(meta, weights);
  if (nc < 0) nc = nc_fallback;
  if (auto it = meta.find("names"); it != meta.end()) {
    try {
      auto j = nlohmann::json::parse(it->second);
      if (j.is_array())
        for (const auto& n : j) lm.names.push_back(n.is_string() ? n.get<std::string>() : n.dump());
    } catch (const nlohmann::json::exception&) {
    }
  }
  graph::BuildOptions bo;
  bo.init = false;
  lm.model = std::make_shared<graph::Model>(graph::parse_model_config(yaml.text, yaml.name, nc), bo);
  lm.cfg = yaml.name;
  lm.stem = yaml.stem;
  // `yolov9 export --fuse` files hold the folded state_dict (no BatchNorm, one conv per RepConvN):
  // fold the freshly built model the same way so its parameters match the file's names and shapes.
  if (auto it = meta.find("fused"); it != meta.end() && it->second == "1") graph::fuse(*lm.model);
  // official attempt_load: (ckpt.get('ema') or ckpt['model'])
  lm.ema = data.tensors.count("ema.model.0.conv.weight") > 0 ||
           std::any_of(data.tensors.begin(), data.tensors.end(),
                       [](const auto& kv) { return kv.first.rfind("ema.", 0) == 0; });
  const std::string prefix = lm.ema ? "ema." : "";
  lm.ema = lm.ema || meta.count("ema") > 0;  // an official .pt: its EMA came under plain names
  graph::LoadOptions lo;
  lo.prefix = prefix;
  try {
    graph::load_state_dict(*lm.model, data.tensors, lo);
  } catch (const engine::ShapeError& e) {
    Y9_THROW(engine::ShapeError, weights, " (model ", yaml.name, ", nc ", lm.model->nc(), "): ", e.message());
  }
  if (fuse) graph::fuse(*lm.model);  // no-op on a file already fused
  lm.model->eval();
  return lm;
}

}  // namespace training
