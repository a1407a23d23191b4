// Model weights in safetensors files, and checkpoint -> graph::Model for val/detect
// (apps/training/weights.h).
#include "apps/training/weights.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "engine/error.h"
#include "graph/state.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace training {

void load_weights(graph::Module& m, const std::string& path, const graph::LoadOptions& opts) {
  auto data = io::load_safetensors(path);
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

LoadedModel load_model(const std::string& weights, const std::string& cfg, int64_t nc_fallback) {
  int64_t nc = nc_fallback;
  Y9_CHECK_T(engine::IoError, fs::is_regular_file(weights), "weights file not found: ", weights);
  io::SafetensorsData data = io::load_safetensors(weights);
  LoadedModel lm;
  const auto& meta = data.metadata;
  std::string yaml = cfg;
  if (yaml.empty()) {
    auto it = meta.find("cfg");
    Y9_CHECK_T(engine::ConfigError, it != meta.end() && !it->second.empty(), weights,
               ": no model config in the checkpoint metadata; give --cfg");
    yaml = it->second;
    if (!fs::exists(yaml)) {
      const fs::path alt = fs::path("configs") / "models" / fs::path(yaml).filename();
      if (fs::exists(alt)) yaml = alt.string();
    }
  }
  if (auto it = meta.find("nc"); it != meta.end()) nc = std::stoll(it->second);
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
  lm.model = std::make_shared<graph::Model>(graph::load_model_config(yaml, nc), bo);
  lm.cfg = yaml;
  // official attempt_load: (ckpt.get('ema') or ckpt['model'])
  lm.ema = data.tensors.count("ema.model.0.conv.weight") > 0 ||
           std::any_of(data.tensors.begin(), data.tensors.end(),
                       [](const auto& kv) { return kv.first.rfind("ema.", 0) == 0; });
  const std::string prefix = lm.ema ? "ema." : "";
  graph::LoadOptions lo;
  lo.prefix = prefix;
  try {
    graph::load_state_dict(*lm.model, data.tensors, lo);
  } catch (const engine::ShapeError& e) {
    Y9_THROW(engine::ShapeError, weights, " (model ", yaml, ", nc ", lm.model->nc(), "): ", e.message());
  }
  lm.model->eval();
  return lm;
}

}  // namespace training
