// Training checkpoint files over io/safetensors: prefix-grouped tensors plus string metadata.
#include "io/checkpoint.h"

#include "engine/autograd.h"
#include "engine/error.h"
#include "io/safetensors.h"

namespace io {

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  std::map<std::string, engine::Tensor> all;
  auto put = [&](const char* prefix, const std::map<std::string, engine::Tensor>& m) {
    for (const auto& [k, t] : m) all.emplace(std::string(prefix) + k, t);
  };
  put(kCkptModel, ck.model);
  put(kCkptEma, ck.ema);
  put(kCkptOptim, ck.optim);
  put(kCkptGrad, ck.grad);
  auto meta = ck.meta;
  meta["format"] = kCkptFormat;
  save_safetensors(path, all, meta);
}

Checkpoint load_checkpoint(const std::string& path) {
  SafetensorsData d = load_safetensors(path);
  Checkpoint ck;
  ck.meta = std::move(d.metadata);
  auto starts = [](const std::string& s, const char* p) { return s.rfind(p, 0) == 0; };
  for (auto& [k, t] : d.tensors) {
    if (starts(k, kCkptEma)) ck.ema.emplace(k.substr(4), t);
    else if (starts(k, kCkptOptim)) ck.optim.emplace(k.substr(6), t);
    else if (starts(k, kCkptGrad)) ck.grad.emplace(k.substr(5), t);
    else if (starts(k, kCkptModel) && ck.meta.count("format")) ck.model.emplace(k.substr(6), t);
    else ck.model.emplace(k, t);  // bare state_dict ("model.0.conv.weight" is its own name)
  }
  return ck;
}

const std::map<std::string, engine::Tensor>& inference_weights(const Checkpoint& ck, const std::string& path) {
  if (!ck.ema.empty()) return ck.ema;
  Y9_CHECK_T(engine::IoError, !ck.model.empty(), path, ": checkpoint holds no model or EMA weights");
  return ck.model;
}

void load_state_into(const std::vector<std::pair<std::string, engine::Tensor>>& dst,
                     const std::map<std::string, engine::Tensor>& src, const std::string& what) {
  for (const auto& [name, t] : dst) {
    auto it = src.find(name);
    Y9_CHECK_T(engine::ConfigError, it != src.end(), what, ": tensor '", name,
               "' of the model is missing (weights from another model config?)");
    Y9_CHECK_T(engine::ConfigError, it->second.shape() == t.shape(), what, ": tensor '", name, "' has shape ",
               engine::shape_str(it->second.shape()), " in the file but ", engine::shape_str(t.shape()),
               " in the model (weights from another model config or class count)");
  }
  engine::autograd::NoGradGuard ng;
  for (const auto& [name, t] : dst) {
    engine::Tensor dstt = t;
    dstt.copy_(src.at(name));
  }
}

}  // namespace io
