// Typed hyperparameters with the file's key order (io/hyp.h).
#include "io/hyp.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/error.h"

namespace io {

namespace {

/// The struct fields by official key name.
double* field(Hyp& h, const std::string& k) {
  static const std::map<std::string, double Hyp::*> fields = {
      {"lr0", &Hyp::lr0},       {"lrf", &Hyp::lrf},
      {"momentum", &Hyp::momentum}, {"weight_decay", &Hyp::weight_decay},
      {"warmup_epochs", &Hyp::warmup_epochs}, {"warmup_momentum", &Hyp::warmup_momentum},
      {"warmup_bias_lr", &Hyp::warmup_bias_lr}, {"box", &Hyp::box},
      {"cls", &Hyp::cls},       {"cls_pw", &Hyp::cls_pw},
      {"obj", &Hyp::obj},       {"obj_pw", &Hyp::obj_pw},
      {"dfl", &Hyp::dfl},       {"iou_t", &Hyp::iou_t},
      {"anchor_t", &Hyp::anchor_t}, {"fl_gamma", &Hyp::fl_gamma},
      {"hsv_h", &Hyp::hsv_h},   {"hsv_s", &Hyp::hsv_s},
      {"hsv_v", &Hyp::hsv_v},   {"degrees", &Hyp::degrees},
      {"translate", &Hyp::translate}, {"scale", &Hyp::scale},
      {"shear", &Hyp::shear},   {"perspective", &Hyp::perspective},
      {"flipud", &Hyp::flipud}, {"fliplr", &Hyp::fliplr},
      {"mosaic", &Hyp::mosaic}, {"mixup", &Hyp::mixup},
      {"copy_paste", &Hyp::copy_paste}};
  auto it = fields.find(k);
  return it == fields.end() ? nullptr : &(h.*(it->second));
}

// Keys the official script reads (KeyError there when missing).
constexpr const char* kRequired[] = {"lr0",     "lrf",       "momentum", "weight_decay", "warmup_epochs",
                                     "warmup_momentum", "warmup_bias_lr", "hsv_h", "hsv_s", "hsv_v",
                                     "degrees", "translate", "scale",    "shear",        "perspective",
                                     "flipud",  "fliplr",    "mosaic",   "mixup",        "copy_paste"};

}  // namespace

bool Hyp::has(const std::string& key) const {
  for (const auto& k : order)
    if (k == key) return true;
  return false;
}

double Hyp::get(const std::string& key) const {
  if (double* f = field(const_cast<Hyp&>(*this), key)) return *f;
  auto it = extra.find(key);
  Y9_CHECK_T(engine::ConfigError, it != extra.end(), "hyp key '", key, "' is missing");
  return it->second;
}

void Hyp::set(const std::string& key, double value) {
  if (double* f = field(*this, key)) *f = value;
  else extra[key] = value;
  if (!has(key)) order.push_back(key);
}

nlohmann::ordered_json Hyp::to_json() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& k : order) j[k] = get(k);
  return j;
}

std::string Hyp::summary() const {
  std::string s;
  char buf[256];
  for (size_t i = 0; i < order.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%s=%g", i ? ", " : "", order[i].c_str(), get(order[i]));
    s += buf;
  }
  return s;
}

Hyp Hyp::load(const std::string& path, bool require_training_keys) {
  Y9_CHECK_T(engine::IoError, std::filesystem::is_regular_file(path), "hyp file not found: ", path);
  YAML::Node y;
  try {
    y = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    Y9_THROW(engine::IoError, path, ": not valid YAML: ", e.what());
  }
  Y9_CHECK_T(engine::ConfigError, y.IsMap(), path, ": a hyp file must be a mapping of key: number");
  Hyp h;
  for (const auto& kv : y) {
    const std::string k = kv.first.as<std::string>();
    double v = 0;
    try {
      v = kv.second.as<double>();
    } catch (const YAML::Exception&) {
      Y9_THROW(engine::ConfigError, path, ": hyp '", k, "' must be a number");
    }
    // A NaN or infinite rate or gain trains to NaN weights without a word: refuse it here.
    Y9_CHECK_T(engine::ConfigError, std::isfinite(v), path, ": hyp '", k, "' is ", kv.second.as<std::string>(),
               "; it must be a finite number");
    h.set(k, v);
  }
  if (require_training_keys) {
    for (const char* k : kRequired)
      Y9_CHECK_T(engine::ConfigError, h.has(k), path, ": hyp key '", k,
                 "' is missing (see configs/hyps/hyp.scratch-high.yaml)");
    // Rates, gains and probabilities of the official keys are never negative; lr0 must move.
    for (const char* k : kRequired)
      Y9_CHECK_T(engine::ConfigError, h.get(k) >= 0, path, ": hyp '", k, "' is ", h.get(k),
                 "; it must not be negative");
    Y9_CHECK_T(engine::ConfigError, h.get("lr0") > 0, path, ": hyp 'lr0' is 0; it must be positive");
  }
  return h;
}

Hyp Hyp::from_json(const nlohmann::json& j) {
  Hyp h;
  Y9_CHECK_T(engine::ConfigError, j.is_object(), "hyp: expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    Y9_CHECK_T(engine::ConfigError, it.value().is_number(), "hyp '", it.key(), "' must be a number");
    h.set(it.key(), it.value().get<double>());
  }
  return h;
}

}  // namespace io
