// ModelEMA (official utils/torch_utils.py) and the FP16 round-trip of model weights.
#include "engine/ema.h"

#include <cmath>
#include <set>

#include "engine/autograd.h"
#include "kernels/cpu/optim.h"

namespace engine {

namespace {
bool is_float(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }
}  // namespace

ModelEMA::ModelEMA(const std::vector<std::pair<std::string, Tensor>>& state, double decay, double tau,
                   int64_t updates)
    : decay_(decay), tau_(tau), updates_(updates) {
  autograd::NoGradGuard no_grad;
  std::set<std::string> seen;
  for (const auto& [name, t] : state) {
    Y9_CHECK(t.defined(), "ModelEMA: tensor '", name, "' is undefined");
    Y9_CHECK(seen.insert(name).second, "ModelEMA: duplicate name '", name, "'");
    state_.emplace_back(name, t.detach().clone());
  }
}

double ModelEMA::decay_at(int64_t u) const { return decay_ * (1.0 - std::exp(-static_cast<double>(u) / tau_)); }

const Tensor& ModelEMA::at(const std::string& name) const {
  for (const auto& np : state_)
    if (np.first == name) return np.second;
  Y9_THROW(Error, "ModelEMA: no tensor named '", name, "'");
}

double ModelEMA::update(const std::vector<std::pair<std::string, Tensor>>& model_state) {
  autograd::NoGradGuard no_grad;
  updates_ += 1;
  const double d = decay_at(updates_);
  // Match names in order first (the usual case), falling back to a search.
  size_t hint = 0;
  for (auto& [name, v] : state_) {
    if (!is_float(v.dtype())) continue;
    const Tensor* m = nullptr;
    for (size_t k = 0; k < model_state.size() && !m; ++k) {
      const size_t i = (hint + k) % model_state.size();
      if (model_state[i].first == name) {
        m = &model_state[i].second;
        hint = i + 1;
      }
    }
    Y9_CHECK(m != nullptr, "ModelEMA::update: the model has no tensor named '", name, "'");
    Y9_CHECK_SHAPE(m->shape() == v.shape(), "ModelEMA::update: '", name, "' is ", m->str(), " in the model, ",
                   v.str(), " in the EMA");
    if (v.dtype() == DType::F32 && v.device().is_cpu() && m->dtype() == DType::F32 && m->device().is_cpu() &&
        m->is_contiguous()) {
      kernels::cpu::ema_update_cpu(v.data<float>(), m->data<float>(), v.numel(), static_cast<float>(d),
                                   static_cast<float>(1.0 - d));
    } else {
      v.mul_(d);
      v.add_(m->detach().to(v.dtype()), 1.0 - d);
    }
  }
  return d;
}

void round_through_fp16_(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || !is_float(t.dtype()) || t.dtype() == DType::F16) continue;
    Tensor h = t.detach().to(DType::F16);
    t.detach().copy_(h);
  }
}

}  // namespace engine
