// Optimizers (SGD, Adam/AdamW, Lion) over parameter groups of a ParamStore, stepping with the
// fused kernel entries of kernels/common/optim.h; the official YOLOv9 three-group construction.
#include "apps/training/optim.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "engine/autograd.h"
#include "kernels/common/optim.h"

namespace training {

using engine::ConfigError;
using engine::DType;
using engine::Error;

// --- kinds -------------------------------------------------------------------------------------

OptimizerKind parse_optimizer_kind(const std::string& name) {
  std::string l = name;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "sgd") return OptimizerKind::SGD;
  if (l == "adam") return OptimizerKind::Adam;
  if (l == "adamw") return OptimizerKind::AdamW;
  if (l == "lion") return OptimizerKind::Lion;
  Y9_THROW(ConfigError, "unknown optimizer '", name, "' (choices: SGD, Adam, AdamW, LION)");
}

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::SGD: return "SGD";
    case OptimizerKind::Adam: return "Adam";
    case OptimizerKind::AdamW: return "AdamW";
    case OptimizerKind::Lion: return "LION";
  }
  return "?";
}

// --- Optimizer base ----------------------------------------------------------------------------

void Optimizer::add_param_group(ParamGroup group) {
  Y9_CHECK(!stepped_, "Optimizer::add_param_group: cannot add a group after the first step()");
  std::set<size_t> seen;
  for (const auto& m : members_) seen.insert(m.begin(), m.end());
  std::set<std::string> names;
  for (const auto& g : groups_)
    for (const auto& [n, t] : g.params) names.insert(n);
  std::vector<size_t> members;
  for (const auto& [n, t] : group.params) {
    Y9_CHECK(t.defined(), "Optimizer::add_param_group: parameter '", n, "' is undefined");
    Y9_CHECK(names.insert(n).second, "Optimizer::add_param_group: parameter '", n, "' appears twice");
    const size_t i = store_.index_of(t);
    Y9_CHECK(seen.insert(i).second, "Optimizer::add_param_group: parameter '", n, "' appears twice");
    if (store_.trainable(i)) members.push_back(i);
  }
  std::sort(members.begin(), members.end());  // layout order: adjacent segments merge into one range
  if (group.initial_lr == 0.0) group.initial_lr = group.lr;
  groups_.push_back(std::move(group));
  members_.push_back(std::move(members));
}

engine::FlatBuffer& Optimizer::state_buffer(const std::string& buffer) {
  auto it = state_.find(buffer);
  if (it == state_.end()) it = state_.emplace(buffer, engine::flat_zeros_like(store_.params())).first;
  return it->second;
}

float* Optimizer::params_base() const { return store_.params().flat.data<float>(); }
const float* Optimizer::grads_base() const { return store_.grads().flat.data<float>(); }

void Optimizer::step() {
  engine::autograd::NoGradGuard no_grad;
  store_.params().flat.storage()->note_write();  // raw writes below: thaw (trainer.cpp freezes)
  stepped_ = true;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& grp = groups_[gi];
    const std::vector<size_t>& members = members_[gi];
    if (members.empty()) continue;
    std::vector<float*> state;
    for (const std::string& b : state_buffers(grp)) state.push_back(state_buffer(b).flat.data<float>());
    // Usually one run: every member has taken the same number of steps.
    std::map<int64_t, std::vector<size_t>> by_step;
    for (size_t i : members) {
      auto it = steps_.find(i);
      by_step[it == steps_.end() ? 0 : it->second].push_back(i);
    }
    for (const auto& [step_before, segs] : by_step) update(grp, store_.ranges(segs), step_before, state);
    for (size_t i : members) steps_[i] += 1;
  }
}

Tensor Optimizer::state(const std::string& name, const std::string& buffer) const {
  const size_t i = store_.index_of(name);
  auto st = steps_.find(i);
  auto it = state_.find(buffer);
  if (st == steps_.end() || it == state_.end()) return Tensor();
  // Only when the parameter's own group keeps this kind of state (SGD without momentum keeps none).
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    if (std::find(members_[gi].begin(), members_[gi].end(), i) == members_[gi].end()) continue;
    const auto kinds = state_buffers(groups_[gi]);
    if (std::find(kinds.begin(), kinds.end(), buffer) == kinds.end()) return Tensor();
    return it->second.segment_view(i);
  }
  return Tensor();
}

int64_t Optimizer::state_step(const std::string& name) const {
  auto it = steps_.find(store_.index_of(name));
  return it == steps_.end() ? 0 : it->second;
}

namespace {
Tensor scalar_f64(double v) { return Tensor::from_vector<double>({v}, {}); }
double read_scalar(const std::map<std::string, Tensor>& sd, const std::string& key, double fallback) {
  auto it = sd.find(key);
  return it == sd.end() ? fallback : it->second.to_vector<double>().at(0);
}
}  // namespace

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> sd;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    const std::string pre = "param_groups." + std::to_string(gi) + ".";
    sd[pre + "lr"] = scalar_f64(g.lr);
    sd[pre + "momentum"] = scalar_f64(g.momentum);
    sd[pre + "weight_decay"] = scalar_f64(g.weight_decay);
    sd[pre + "initial_lr"] = scalar_f64(g.initial_lr);
    sd[pre + "nesterov"] = scalar_f64(g.nesterov ? 1.0 : 0.0);
    sd[pre + "dampening"] = scalar_f64(g.dampening);
  }
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto names = state_buffers(groups_[gi]);
    for (size_t i : members_[gi]) {
      auto st = steps_.find(i);
      if (st == steps_.end() || st->second == 0) continue;
      const std::string& name = store_.name(i);
      sd["state." + name + ".step"] = scalar_f64(static_cast<double>(st->second));
      for (const auto& b : names) sd["state." + name + "." + b] = state_.at(b).segment_view(i).clone();
    }
  }
  return sd;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& sd) {
  engine::autograd::NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    const std::string pre = "param_groups." + std::to_string(gi) + ".";
    Y9_CHECK(sd.count(pre + "lr"), "Optimizer::load_state_dict: no entry for group ", gi);
    g.lr = read_scalar(sd, pre + "lr", g.lr);
    g.momentum = read_scalar(sd, pre + "momentum", g.momentum);
    g.weight_decay = read_scalar(sd, pre + "weight_decay", g.weight_decay);
    g.initial_lr = read_scalar(sd, pre + "initial_lr", g.initial_lr);
    g.nesterov = read_scalar(sd, pre + "nesterov", g.nesterov ? 1.0 : 0.0) != 0.0;
    g.dampening = read_scalar(sd, pre + "dampening", g.dampening);
  }
  Y9_CHECK(!sd.count("param_groups." + std::to_string(groups_.size()) + ".lr"),
           "Optimizer::load_state_dict: the state has more groups than this optimizer (", groups_.size(), ")");
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const auto names = state_buffers(groups_[gi]);
    for (size_t i : members_[gi]) {
      const std::string& name = store_.name(i);
      auto it = sd.find("state." + name + ".step");
      if (it == sd.end()) continue;
      steps_[i] = static_cast<int64_t>(it->second.to_vector<double>().at(0));
      for (const auto& b : names) {
        auto bt = sd.find("state." + name + "." + b);
        Y9_CHECK(bt != sd.end(), "Optimizer::load_state_dict: missing state." + name + "." + b);
        Tensor dst = state_buffer(b).segment_view(i);
        Y9_CHECK_SHAPE(bt->second.shape() == dst.shape(), "Optimizer::load_state_dict: ", b, " of '", name, "' is ",
                       bt->second.str(), ", parameter is ", dst.str());
        dst.copy_(bt->second);
      }
    }
  }
}

// --- SGD ---------------------------------------------------------------------------------------

std::vector<std::string> SGD::state_buffers(const ParamGroup& g) const {
  if (g.momentum == 0.0) return {};
  return {"momentum_buffer"};
}

void SGD::update(const ParamGroup& g, const std::vector<kernels::FlatRange>& ranges, int64_t step_before,
                 const std::vector<float*>& state) {
  kernels::SgdScalars s;
  s.lr = static_cast<float>(g.lr);
  s.momentum = static_cast<float>(g.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - g.dampening);
  s.weight_decay = static_cast<float>(g.weight_decay);
  s.nesterov = g.nesterov;
  s.first_step = step_before == 0;
  auto k = engine::kernel(kernels::kSgdStep, DType::F32, store().params().flat.device());
  k.fn(k.ctx, params_base(), grads_base(), state.empty() ? nullptr : state[0], ranges.data(),
       static_cast<int64_t>(ranges.size()), s);
}

// --- Adam / AdamW ------------------------------------------------------------------------------

std::vector<std::string> Adam::state_buffers(const ParamGroup&) const {
  if (amsgrad_) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::update(const ParamGroup& g, const std::vector<kernels::FlatRange>& ranges, int64_t step_before,
                  const std::vector<float*>& state) {
  const double step = static_cast<double>(step_before + 1);
  const double beta1 = g.momentum;
  kernels::AdamScalars s;
  s.beta1 = static_cast<float>(beta1);
  s.beta2 = static_cast<float>(beta2_);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2_);
  s.eps = static_cast<float>(eps_);
  s.weight_decay = static_cast<float>(g.weight_decay);
  s.decoupled = decoupled_;
  s.decay_factor = static_cast<float>(1.0 - g.lr * g.weight_decay);
  s.amsgrad = amsgrad_;
  s.step_size = static_cast<float>(g.lr / (1.0 - std::pow(beta1, step)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2_, step)));
  auto k = engine::kernel(kernels::kAdamStep, DType::F32, store().params().flat.device());
  k.fn(k.ctx, params_base(), grads_base(), state[0], state[1], amsgrad_ ? state[2] : nullptr, ranges.data(),
       static_cast<int64_t>(ranges.size()), s);
}

// --- Lion --------------------------------------------------------------------------------------

std::vector<std::string> Lion::state_buffers(const ParamGroup&) const { return {"exp_avg"}; }

void Lion::update(const ParamGroup& g, const std::vector<kernels::FlatRange>& ranges, int64_t,
                  const std::vector<float*>& state) {
  kernels::LionScalars s;
  s.lr = static_cast<float>(g.lr);
  s.beta1 = static_cast<float>(g.momentum);
  s.beta2 = static_cast<float>(beta2_);
  s.one_minus_beta1 = static_cast<float>(1.0 - g.momentum);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2_);
  s.decay_factor = static_cast<float>(1.0 - g.lr * g.weight_decay);
  auto k = engine::kernel(kernels::kLionStep, DType::F32, store().params().flat.device());
  k.fn(k.ctx, params_base(), grads_base(), state[0], ranges.data(), static_cast<int64_t>(ranges.size()), s);
}

// --- official construction ---------------------------------------------------------------------

OfficialParamSplit split_official_param_groups(const NamedTensors& params,
                                               const std::function<bool(const std::string&)>& is_norm_weight) {
  OfficialParamSplit out;
  for (const auto& np : params) {
    const std::string& n = np.first;
    const auto dot = n.rfind('.');
    const std::string leaf = dot == std::string::npos ? n : n.substr(dot + 1);
    if (leaf == "bias") {
      out.bias.push_back(np);
    } else if (leaf == "weight" && is_norm_weight && is_norm_weight(n)) {
      out.norm.push_back(np);
    } else {
      out.decay.push_back(np);
    }
  }
  return out;
}

std::unique_ptr<Optimizer> make_official_optimizer(OptimizerKind kind, ParamStore& store,
                                                   const OfficialParamSplit& split, double lr, double momentum,
                                                   double decay) {
  std::unique_ptr<Optimizer> opt;
  bool nesterov = false;
  switch (kind) {
    case OptimizerKind::SGD: opt = std::make_unique<SGD>(store); nesterov = true; break;
    case OptimizerKind::Adam: opt = std::make_unique<Adam>(store, false, 0.999, 1e-8, false); break;
    case OptimizerKind::AdamW: opt = std::make_unique<Adam>(store, true, 0.999, 1e-8, true); break;
    case OptimizerKind::Lion: opt = std::make_unique<Lion>(store, 0.99); break;
  }
  auto group = [&](const NamedTensors& ps, double wd) {
    ParamGroup g;
    g.params = ps;
    g.lr = lr;
    g.initial_lr = lr;
    g.momentum = momentum;
    g.weight_decay = wd;
    g.nesterov = nesterov;
    return g;
  };
  opt->add_param_group(group(split.bias, 0.0));
  opt->add_param_group(group(split.decay, decay));
  opt->add_param_group(group(split.norm, 0.0));
  return opt;
}

int64_t official_accumulate(int64_t batch_size, int64_t nbs) {
  Y9_CHECK(batch_size > 0 && nbs > 0, "official_accumulate: batch_size ", batch_size, " and nbs ", nbs,
           " must be positive");
  const double r = std::nearbyint(static_cast<double>(nbs) / static_cast<double>(batch_size));  // half-to-even
  return std::max<int64_t>(static_cast<int64_t>(r), 1);
}

double official_weight_decay(double weight_decay, int64_t batch_size, int64_t accumulate, int64_t nbs) {
  // Python: hyp['weight_decay'] *= batch_size * accumulate / nbs  (the factor is evaluated first)
  return weight_decay * (static_cast<double>(batch_size * accumulate) / static_cast<double>(nbs));
}

}  // namespace training
