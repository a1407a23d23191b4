// Optimizers (SGD, Adam/AdamW, Lion) over parameter groups, stepping over flat spans with the
// CPU twins in kernels/cpu/optim.cpp; the official YOLOv9 three-group construction.
#include "engine/optim.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "engine/autograd.h"
#include "kernels/cpu/optim.h"

namespace engine {

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
  std::set<std::string> seen;
  for (const auto& g : groups_)
    for (const auto& [n, t] : g.params) seen.insert(n);
  for (const auto& [n, t] : group.params) {
    Y9_CHECK(t.defined(), "Optimizer::add_param_group: parameter '", n, "' is undefined");
    Y9_CHECK(seen.insert(n).second, "Optimizer::add_param_group: parameter '", n, "' appears twice");
  }
  if (group.initial_lr == 0.0) group.initial_lr = group.lr;
  groups_.push_back(std::move(group));
  group_state_allocated_.push_back(false);
}

void Optimizer::ensure_state(size_t gi) {
  if (group_state_allocated_[gi]) return;
  const ParamGroup& g = groups_[gi];
  NamedTensors trainable;
  for (const auto& np : g.params)
    if (np.second.requires_grad() || np.second.grad().defined()) trainable.push_back(np);
  group_state_allocated_[gi] = true;
  if (trainable.empty()) return;
  for (const std::string& buf : state_buffers(g)) {
    // One zeroed flat buffer per state kind, laid out like the group's parameters.
    NamedTensors zeros;
    zeros.reserve(trainable.size());
    for (const auto& [n, t] : trainable) zeros.emplace_back(n, Tensor::zeros(t.shape(), t.dtype(), t.device()));
    FlatBuffer fb = pack_flat(zeros);
    for (size_t k = 0; k < trainable.size(); ++k) {
      auto& st = state_[trainable[k].first];
      auto it = st.bufs.find(buf);
      Tensor view = fb.segment_view(k);
      if (it != st.bufs.end() && it->second.defined()) view.copy_(it->second);  // loaded earlier
      st.bufs[buf] = view;
    }
  }
}

void Optimizer::step() {
  autograd::NoGradGuard no_grad;
  stepped_ = true;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ensure_state(gi);
    const ParamGroup& grp = groups_[gi];
    const auto names = state_buffers(grp);
    std::vector<Span> spans;
    std::vector<const void*> storages;  // [span][0]=p, [1]=g, [2..]=state storages of the last param
    std::vector<ParamState*> members;
    std::vector<size_t> member_span;
    for (const auto& [name, p] : grp.params) {
      const Tensor& gr = p.grad();
      if (!gr.defined()) continue;
      Y9_CHECK(p.dtype() == DType::F32 && gr.dtype() == DType::F32, "Optimizer::step: parameter '", name,
               "' or its grad is not F32 (", p.str(), ", ", gr.str(), ")");
      Y9_CHECK(p.device().is_cpu() && gr.device().is_cpu(), "Optimizer::step: parameter '", name,
               "' is not on the CPU (the CUDA fused optimizer is not built yet)");
      Y9_CHECK(p.is_contiguous() && gr.is_contiguous(), "Optimizer::step: parameter '", name,
               "' or its grad is not contiguous");
      Y9_CHECK_SHAPE(gr.shape() == p.shape(), "Optimizer::step: grad ", gr.str(), " of '", name, "' vs ", p.str());
      ParamState& st = state_[name];
      Span sp{p.data<float>(), gr.data<float>(), {}, p.numel(), st.step};
      std::vector<const void*> stor{p.storage().get(), gr.storage().get()};
      for (const auto& b : names) {
        Tensor& t = st.bufs[b];
        Y9_ASSERT(t.defined(), "Optimizer::step: state '", b, "' missing for '", name, "'");
        sp.s.push_back(t.data<float>());
        stor.push_back(t.storage().get());
      }
      // Merge with the previous span when every array continues it across < 256 bytes of padding
      // inside the same storage (only flat-buffer padding can sit there, see flat_params.h).
      bool merged = false;
      if (!spans.empty()) {
        Span& last = spans.back();
        const size_t base = (spans.size() - 1) * stor.size();
        bool same = last.step_before == sp.step_before && storages.size() == spans.size() * stor.size();
        const int64_t delta = sp.p - last.p;
        const int64_t al = kFlatAlignBytes / static_cast<int64_t>(sizeof(float));
        same = same && delta >= last.n && delta - last.n < al;
        for (size_t k = 0; same && k < stor.size(); ++k) same = storages[base + k] == stor[k];
        same = same && (sp.g - last.g) == delta;
        for (size_t k = 0; same && k < sp.s.size(); ++k) same = (sp.s[k] - last.s[k]) == delta;
        if (same) {
          last.n = delta + sp.n;
          merged = true;
        }
      }
      if (!merged) {
        spans.push_back(std::move(sp));
        storages.insert(storages.end(), stor.begin(), stor.end());
      }
      members.push_back(&st);
    }
    for (const Span& sp : spans) update(grp, sp);
    for (ParamState* st : members) st->step += 1;
  }
}

void Optimizer::zero_grad() {
  autograd::NoGradGuard no_grad;
  for (auto& g : groups_)
    for (auto& [n, p] : g.params)
      if (p.grad().defined()) Tensor(p.grad()).zero_();
}

Tensor Optimizer::state(const std::string& name, const std::string& buffer) const {
  auto it = state_.find(name);
  if (it == state_.end() || it->second.step == 0) return Tensor();
  auto b = it->second.bufs.find(buffer);
  return b == it->second.bufs.end() ? Tensor() : b->second;
}

int64_t Optimizer::state_step(const std::string& name) const {
  auto it = state_.find(name);
  return it == state_.end() ? 0 : it->second.step;
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
  for (const auto& [name, st] : state_) {
    if (st.step == 0) continue;
    sd["state." + name + ".step"] = scalar_f64(static_cast<double>(st.step));
    for (const auto& [b, t] : st.bufs) sd["state." + name + "." + b] = t.clone();
  }
  return sd;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& sd) {
  autograd::NoGradGuard no_grad;
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
    for (const auto& [name, p] : groups_[gi].params) {
      auto it = sd.find("state." + name + ".step");
      if (it == sd.end()) continue;
      ParamState& st = state_[name];
      st.step = static_cast<int64_t>(it->second.to_vector<double>().at(0));
      for (const auto& b : names) {
        auto bt = sd.find("state." + name + "." + b);
        Y9_CHECK(bt != sd.end(), "Optimizer::load_state_dict: missing state." + name + "." + b);
        Y9_CHECK_SHAPE(bt->second.shape() == p.shape(), "Optimizer::load_state_dict: ", b, " of '", name, "' is ",
                       bt->second.str(), ", parameter is ", p.str());
        Tensor& dst = st.bufs[b];
        if (dst.defined()) {
          dst.copy_(bt->second);
        } else {
          dst = bt->second.to(p.dtype()).clone();  // moved into the flat state by ensure_state
        }
      }
    }
  }
}

// --- SGD ---------------------------------------------------------------------------------------

std::vector<std::string> SGD::state_buffers(const ParamGroup& g) const {
  if (g.momentum == 0.0) return {};
  return {"momentum_buffer"};
}

void SGD::update(const ParamGroup& g, const Span& sp) {
  kernels::SgdScalars s;
  s.lr = static_cast<float>(g.lr);
  s.momentum = static_cast<float>(g.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - g.dampening);
  s.weight_decay = static_cast<float>(g.weight_decay);
  s.nesterov = g.nesterov;
  s.first_step = sp.step_before == 0;
  kernels::cpu::sgd_step_cpu(sp.p, sp.g, sp.s.empty() ? nullptr : sp.s[0], sp.n, s);
}

// --- Adam / AdamW ------------------------------------------------------------------------------

std::vector<std::string> Adam::state_buffers(const ParamGroup&) const {
  if (amsgrad_) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::update(const ParamGroup& g, const Span& sp) {
  const double step = static_cast<double>(sp.step_before + 1);
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
  kernels::cpu::adam_step_cpu(sp.p, sp.g, sp.s[0], sp.s[1], amsgrad_ ? sp.s[2] : nullptr, sp.n, s);
}

// --- Lion --------------------------------------------------------------------------------------

std::vector<std::string> Lion::state_buffers(const ParamGroup&) const { return {"exp_avg"}; }

void Lion::update(const ParamGroup& g, const Span& sp) {
  kernels::LionScalars s;
  s.lr = static_cast<float>(g.lr);
  s.beta1 = static_cast<float>(g.momentum);
  s.beta2 = static_cast<float>(beta2_);
  s.one_minus_beta1 = static_cast<float>(1.0 - g.momentum);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2_);
  s.decay_factor = static_cast<float>(1.0 - g.lr * g.weight_decay);
  kernels::cpu::lion_step_cpu(sp.p, sp.g, sp.s[0], sp.n, s);
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

std::unique_ptr<Optimizer> make_official_optimizer(OptimizerKind kind, const OfficialParamSplit& split, double lr,
                                                   double momentum, double decay) {
  std::unique_ptr<Optimizer> opt;
  bool nesterov = false;
  switch (kind) {
    case OptimizerKind::SGD: opt = std::make_unique<SGD>(); nesterov = true; break;
    case OptimizerKind::Adam: opt = std::make_unique<Adam>(false, 0.999, 1e-8, false); break;
    case OptimizerKind::AdamW: opt = std::make_unique<Adam>(true, 0.999, 1e-8, true); break;
    case OptimizerKind::Lion: opt = std::make_unique<Lion>(0.99); break;
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

}  // namespace engine
