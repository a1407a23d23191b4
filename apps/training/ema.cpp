// ModelEMA over flat buffers (official utils/torch_utils.py) and the FP16 round-trip of weights.
#include "apps/training/ema.h"

#include <cmath>
#include <set>

#include "engine/autograd.h"
#include "kernels/common/optim.h"

namespace training {

using engine::DType;

ModelEMA::ModelEMA(const std::vector<engine::FlatBuffer>& flats,
                   const std::vector<std::pair<std::string, Tensor>>& state, double decay, double tau, int64_t updates)
    : model_flats_(flats), decay_(decay), tau_(tau), updates_(updates) {
  engine::autograd::NoGradGuard no_grad;
  for (const auto& f : flats) {
    Y9_CHECK(f.flat.defined() && f.flat.dtype() == DType::F32, "ModelEMA: flat buffers must be F32, got ",
             f.flat.defined() ? f.flat.str() : "undefined");
    engine::FlatBuffer e = engine::flat_zeros_like(f);
    e.flat.copy_(f.flat);
    ema_flats_.push_back(std::move(e));
  }
  std::set<std::string> seen;
  for (const auto& [name, t] : state) {
    Y9_CHECK(t.defined(), "ModelEMA: tensor '", name, "' is undefined");
    Y9_CHECK(seen.insert(name).second, "ModelEMA: duplicate name '", name, "'");
    if (!engine::is_floating(t.dtype())) {
      state_.emplace_back(name, t.detach().clone());
      continue;
    }
    // The EMA view at the same place in the EMA's copy of the flat buffer holding t.
    bool found = false;
    for (size_t k = 0; k < model_flats_.size() && !found; ++k) {
      const Tensor& mf = model_flats_[k].flat;
      if (t.storage() != mf.storage()) continue;
      const int64_t rel = t.offset() - mf.offset();
      Y9_CHECK(rel >= 0 && rel + t.numel() <= mf.numel() && t.is_contiguous(), "ModelEMA: '", name,
               "' is not a contiguous slice of its flat buffer");
      const Tensor& ef = ema_flats_[k].flat;
      state_.emplace_back(name, Tensor::make_view(ef.storage(), ef.offset() + rel, t.shape(), t.strides(), t.dtype()));
      found = true;
    }
    Y9_CHECK(found, "ModelEMA: floating tensor '", name, "' (", t.str(), ") is not in the model's flat buffers");
  }
}

double ModelEMA::decay_at(int64_t u) const { return decay_ * (1.0 - std::exp(-static_cast<double>(u) / tau_)); }

const Tensor& ModelEMA::at(const std::string& name) const {
  for (const auto& np : state_)
    if (np.first == name) return np.second;
  Y9_THROW(engine::Error, "ModelEMA: no tensor named '", name, "'");
}

double ModelEMA::update() {
  updates_ += 1;
  const double d = decay_at(updates_);
  for (size_t k = 0; k < ema_flats_.size(); ++k) {
    const Tensor& e = ema_flats_[k].flat;
    auto kern = engine::kernel(kernels::kEmaUpdate, DType::F32, e.device());
    kern.fn(kern.ctx, e.data<float>(), model_flats_[k].flat.data<float>(), e.numel(), static_cast<float>(d),
            static_cast<float>(1.0 - d));
  }
  return d;
}

void round_through_fp16_(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  engine::autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || !engine::is_floating(t.dtype()) || t.dtype() == DType::F16) continue;
    Tensor h = t.detach().to(DType::F16);
    t.detach().copy_(h);
  }
}

}  // namespace training
