// Training checkpoint files over io/safetensors: prefix-grouped tensors plus string metadata.
#include "io/checkpoint.h"

#include <charconv>
#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "io/safetensors.h"
#include "io/torch_pt.h"

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
  if (is_torch_pt_file(path)) return load_torch_checkpoint(path);  // an official PyTorch .pt
  SafetensorsData d = load_safetensors(path);
  Checkpoint ck;
  ck.meta = std::move(d.metadata);
  auto starts = [](const std::string& s, const char* p) { return s.rfind(p, 0) == 0; };
  // Only a training checkpoint groups its tensors under prefixes; in any other file (a bare or
  // exported state_dict) "model.0.conv.weight" is the tensor's own name.
  auto f = ck.meta.find("format");
  const bool grouped = f != ck.meta.end() && f->second == kCkptFormat;
  for (auto& [k, t] : d.tensors) {
    if (!grouped) ck.model.emplace(k, t);
    else if (starts(k, kCkptEma)) ck.ema.emplace(k.substr(4), t);
    else if (starts(k, kCkptOptim)) ck.optim.emplace(k.substr(6), t);
    else if (starts(k, kCkptGrad)) ck.grad.emplace(k.substr(5), t);
    else if (starts(k, kCkptModel)) ck.model.emplace(k.substr(6), t);
    else ck.model.emplace(k, t);
  }
  return ck;
}

SafetensorsData load_weights_file(const std::string& path) {
  if (!is_torch_pt_file(path)) return load_safetensors(path);
  Checkpoint ck = load_torch_checkpoint(path);
  SafetensorsData d;
  d.tensors = inference_weights(ck, path);
  d.metadata = std::move(ck.meta);
  if (!ck.ema.empty()) d.metadata["ema"] = "1";
  return d;
}

const std::string& meta_str(const Checkpoint& ck, const std::string& key, const std::string& path) {
  auto it = ck.meta.find(key);
  Y9_CHECK_T(engine::ConfigError, it != ck.meta.end(), path, ": checkpoint metadata '", key,
             "' is missing (not a checkpoint written by `yolov9 train`, or a damaged one)");
  return it->second;
}

int64_t meta_int(const Checkpoint& ck, const std::string& key, const std::string& path, int64_t lo, int64_t hi) {
  const std::string& s = meta_str(ck, key, path);
  int64_t v = 0;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  auto [p, ec] = std::from_chars(b, e, v);
  Y9_CHECK_T(engine::ConfigError, ec == std::errc() && p == e && !s.empty(), path, ": checkpoint metadata '", key,
             "' is not an integer ('", s.substr(0, 40), "')");
  Y9_CHECK_T(engine::ConfigError, v >= lo && v <= hi, path, ": checkpoint metadata '", key, "' is ", v,
             ", outside [", lo, ", ", hi, "]");
  return v;
}

double meta_double(const Checkpoint& ck, const std::string& key, const std::string& path) {
  const std::string& s = meta_str(ck, key, path);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  Y9_CHECK_T(engine::ConfigError, ec == std::errc() && p == s.data() + s.size() && !s.empty() && std::isfinite(v),
             path, ": checkpoint metadata '", key, "' is not a finite number ('", s.substr(0, 40), "')");
  return v;
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
