// Resume of an official train_dual.py checkpoint: its options (opt.yaml text or ckpt['opt'] as
// JSON, into TrainOptions) and its torch.optim state (integer ids -> our parameter names, by the
// official smart_optimizer group order; shapes and buffer kinds checked).
#include "apps/training/pt_resume.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "engine/error.h"

namespace training {

using engine::Tensor;

namespace {

Tensor scalar_f64(double v) {
  Tensor t = Tensor::empty({}, engine::DType::F64, engine::Device::cpu());
  *static_cast<double*>(t.data_ptr()) = v;
  return t;
}

// A YAML scalar as yaml.safe_load reads the values an opt.yaml holds.
nlohmann::json scalar_json(const YAML::Node& n) {
  const std::string s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted: a string
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  char* end = nullptr;
  const long long i = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() && *end == '\0') return static_cast<int64_t>(i);
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() && *end == '\0' && s.find_first_of("0123456789") != std::string::npos) return d;
  return s;
}

nlohmann::json node_json(const YAML::Node& n, int depth) {
  Y9_CHECK_T(engine::ConfigError, depth < 100, "YAML nested deeper than 100");
  if (n.IsScalar()) return scalar_json(n);
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : n) a.push_back(node_json(x, depth + 1));
    return a;
  }
  if (n.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& kv : n) o[kv.first.as<std::string>()] = node_json(kv.second, depth + 1);
    return o;
  }
  return nullptr;
}

}  // namespace

nlohmann::json yaml_text_to_json(const std::string& text, const std::string& source) {
  try {
    return node_json(YAML::Load(text), 0);
  } catch (const YAML::Exception& e) {
    Y9_THROW(engine::ConfigError, source, ": not valid YAML: ", e.what());
  }
}

TrainOptions options_from_official(const nlohmann::json& official, nlohmann::json& hyp, const std::string& source) {
  Y9_CHECK_T(engine::ConfigError, official.is_object(), source, ": the training options are not a dict (got ",
             official.type_name(), ")");
  hyp = official.contains("hyp") ? official.at("hyp") : nlohmann::json();
  nlohmann::json kept = nlohmann::json::object();
  for (auto it = official.begin(); it != official.end(); ++it) {
    if (it.key() == "hyp" || it.key() == "resume" || it.value().is_null()) continue;
    nlohmann::json one = nlohmann::json::object();
    one[it.key()] = it.value();
    try {
      (void)options_from_json(one);  // a value of another type than ours: our default stays
      kept[it.key()] = it.value();
    } catch (const engine::ConfigError&) {
    }
  }
  return options_from_json(kept);
}

std::map<std::string, Tensor> torch_optimizer_state_dict(const io::PtOptimizerState& st, const Optimizer& opt,
                                                         const std::string& file) {
  const auto& groups = opt.param_groups();
  const char* kind = optimizer_kind_name(opt.kind());
  Y9_CHECK_T(engine::ConfigError, st.groups.size() == groups.size(), file, ": the optimizer state has ",
             st.groups.size(), " parameter groups; the official ", kind, " of this model has ", groups.size(),
             " (biases, decayed weights, normalisation weights)");
  std::map<std::string, Tensor> sd;
  // torch's parameter ids: 0, 1, ... over the groups in order (Optimizer.state_dict packs them so).
  std::map<int64_t, std::pair<std::string, Tensor>> by_id;
  static const char* kGroupName[] = {"biases", "decayed weights", "normalisation weights"};
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& ours = groups[g].params;
    const auto& theirs = st.groups[g];
    Y9_CHECK_T(engine::ConfigError, theirs.params.size() == ours.size(), file, ": optimizer parameter group ", g,
               " (", g < 3 ? kGroupName[g] : "?", ") has ", theirs.params.size(), " parameters; this model has ",
               ours.size(), " (a checkpoint of another model config?)");
    for (size_t k = 0; k < ours.size(); ++k) by_id[theirs.params[k]] = ours[k];
    const std::string pre = "param_groups." + std::to_string(g) + ".";
    auto num = [&](const char* key, double fallback) {
      auto it = theirs.numbers.find(key);
      return it != theirs.numbers.end() ? it->second : fallback;
    };
    const ParamGroup& pg = groups[g];
    Y9_CHECK_T(engine::ConfigError, theirs.numbers.count("lr"), file, ": optimizer parameter group ", g,
               " has no lr");
    sd[pre + "lr"] = scalar_f64(num("lr", pg.lr));
    sd[pre + "initial_lr"] = scalar_f64(num("initial_lr", num("lr", pg.lr)));
    sd[pre + "weight_decay"] = scalar_f64(num("weight_decay", pg.weight_decay));
    const bool sgd = opt.kind() == OptimizerKind::SGD;
    Y9_CHECK_T(engine::ConfigError, sgd ? theirs.numbers.count("momentum") > 0 : theirs.numbers.count("beta1") > 0,
               file, ": optimizer parameter group ", g, " has no ", sgd ? "momentum" : "betas",
               ": not the state of ", kind, " (the run's --optimizer)");
    sd[pre + "momentum"] = scalar_f64(sgd ? num("momentum", pg.momentum) : num("beta1", pg.momentum));
    sd[pre + "nesterov"] = scalar_f64(num("nesterov", pg.nesterov ? 1.0 : 0.0));
    sd[pre + "dampening"] = scalar_f64(num("dampening", pg.dampening));
  }
  std::vector<std::string> want;
  switch (opt.kind()) {
    case OptimizerKind::SGD: want = {"momentum_buffer"}; break;
    case OptimizerKind::Adam: want = {"exp_avg", "exp_avg_sq"}; break;
    case OptimizerKind::AdamW: want = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; break;
    case OptimizerKind::Lion: want = {"exp_avg"}; break;
  }
  const std::set<std::string> allowed(want.begin(), want.end());
  for (const auto& [id, bufs] : st.state) {
    auto p = by_id.find(id);
    Y9_CHECK_T(engine::ConfigError, p != by_id.end(), file, ": optimizer state for parameter id ", id,
               ", which no parameter group holds");
    const std::string& name = p->second.first;
    const Tensor& param = p->second.second;
    for (const auto& [b, t] : bufs) {
      if (b == "step") continue;
      Y9_CHECK_T(engine::ConfigError, allowed.count(b), file, ": optimizer state '", b, "' of parameter ", name,
                 " (id ", id, ") does not belong to ", kind, " (the run's --optimizer)");
      Y9_CHECK_T(engine::ConfigError, t.shape() == param.shape(), file, ": optimizer state '", b, "' of parameter ",
                 name, " (id ", id, ") has shape ", engine::shape_str(t.shape()), ", the parameter ",
                 engine::shape_str(param.shape()));
      sd["state." + name + "." + b] = t;
    }
    bool any = false;
    for (const auto& b : want) {
      const bool has = bufs.count(b) > 0;
      any = any || has;
      Y9_CHECK_T(engine::ConfigError, has, file,
                 ": optimizer state of parameter ", name, " (id ", id, ") has no '", b, "' (", kind, ")");
    }
    if (!any) continue;
    auto step = bufs.find("step");
    sd["state." + name + ".step"] = step != bufs.end() ? step->second : scalar_f64(1.0);
  }
  return sd;
}

}  // namespace training
