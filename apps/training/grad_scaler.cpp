// GradScaler (torch/cuda/amp/grad_scaler.py semantics) over a ParamStore's flat F32 gradients.
#include "apps/training/grad_scaler.h"

#include <cstdint>
#include <string>
#include <vector>

#include "apps/training/clip.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "kernels/common/amp.h"
#include "ops/ops.h"

namespace training {

const char* amp_mode_name(AmpMode m) {
  switch (m) {
    case AmpMode::FP16: return "fp16";
    case AmpMode::BF16: return "bf16";
    default: return "off";
  }
}

AmpMode resolve_amp_mode(const std::string& flag, bool cuda_training, std::string* notice, bool cpu_bf16) {
  Y9_CHECK_T(engine::ConfigError, flag == "auto" || flag == "fp16" || flag == "bf16" || flag == "off", "--amp ", flag,
             ": expected fp16 or bf16 (or --no-amp)");
  if (notice) notice->clear();
  if (flag == "off") return AmpMode::Off;
  if (!cuda_training) {
    if (flag == "bf16" && cpu_bf16) {
      if (notice)
        *notice = "CPU: convolutions in BF16 (oneDNN's native BF16 kernels, F32 accumulation; the larger 3x3 "
                  "stride-1 ones in F32 Winograd, faster here, unless Y9_CPU_WINOGRAD=0), everything else in F32; "
                  "validation in F32. Not the official code's CPU training, which is FP32 throughout";
      return AmpMode::BF16;
    }
    if (notice && flag == "bf16") {
      *notice = "ignored: this CPU has no native BF16 (AVX512_BF16 or AMX) for BF16 convolutions; training on the "
                "CPU in FP32";
      return AmpMode::Off;
    }
    if (notice && flag != "auto")
      *notice = std::string("ignored: AMP is CUDA-only (official train_dual.py: amp = check_amp(model) on CUDA "
                            "devices); training on the CPU in FP32") +
                (cpu_bf16 ? " (this CPU has native BF16: --amp bf16 runs its convolutions in BF16)" : "");
    return AmpMode::Off;
  }
  return flag == "bf16" ? AmpMode::BF16 : AmpMode::FP16;
}

GradScaler::GradScaler(engine::Device device, GradScalerOptions o) : o_(o), device_(device) {
  Y9_CHECK_T(engine::ConfigError, o_.growth_factor > 1.0, "GradScaler: growth_factor should be > 1 (got ",
             o_.growth_factor, ")");
  Y9_CHECK_T(engine::ConfigError, o_.backoff_factor > 0.0 && o_.backoff_factor < 1.0,
             "GradScaler: backoff_factor should be < 1 and > 0 (got ", o_.backoff_factor, ")");
  Y9_CHECK_T(engine::ConfigError, o_.growth_interval >= 1 && o_.growth_interval <= INT32_MAX,
             "GradScaler: growth_interval should be >= 1 (got ", o_.growth_interval, ")");
  Y9_CHECK_T(engine::ConfigError, o_.init_scale > 0.0, "GradScaler: init_scale should be > 0 (got ", o_.init_scale,
             ")");
  if (!o_.enabled) return;
  scale_ = Tensor::full({1}, static_cast<double>(static_cast<float>(o_.init_scale)), engine::DType::F32, device_);
  growth_tracker_ = Tensor::zeros({1}, engine::DType::I32, device_);
  found_inf_ = Tensor::zeros({1}, engine::DType::F32, device_);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!o_.enabled) return loss;
  Y9_CHECK(loss.device() == device_, "GradScaler::scale: the loss is on ", loss.device().str(),
           " but the scaler on ", device_.str());
  const Tensor l = loss.dtype() == engine::DType::F32 ? loss : loss.to(engine::DType::F32);
  return ops::mul(l, scale_.reshape({}));
}

void GradScaler::unscale(const ParamStore& store) {
  if (!o_.enabled) return;
  Y9_CHECK(stage_ == Stage::Ready, "unscale_() has already been called on this optimizer since the last update().");
  const Tensor& g = store.grads().flat;
  Y9_CHECK(g.device() == device_ && g.dtype() == engine::DType::F32, "GradScaler::unscale: the gradients (",
           g.str(), ") must be F32 on the scaler's device ", device_.str());
  engine::autograd::NoGradGuard ng;
  // PyTorch: inv_scale = self._scale.double().reciprocal().float(), on the device.
  const Tensor inv = ops::div(Tensor::ones({1}, engine::DType::F64, device_), scale_.to(engine::DType::F64))
                         .to(engine::DType::F32)
                         .contiguous();
  found_inf_.zero_();
  std::vector<size_t> trainable;
  for (size_t i = 0; i < store.size(); ++i)
    if (store.trainable(i)) trainable.push_back(i);
  const std::vector<kernels::FlatRange> ranges = store.ranges(trainable);
  if (!ranges.empty()) {
    auto k = engine::kernel(kernels::kAmpUnscale, engine::DType::F32, device_);
    k.fn(k.ctx, g.data<float>(), ranges.data(), static_cast<int64_t>(ranges.size()), inv.data<float>(),
         found_inf_.data<float>());
  }
  stage_ = Stage::Unscaled;
}

bool GradScaler::step(Optimizer& opt) {
  if (!o_.enabled) {
    opt.step();
    last_skipped_ = false;
    return true;
  }
  Y9_CHECK(stage_ != Stage::Stepped, "step() has already been called since the last update().");
  if (stage_ == Stage::Ready) unscale(opt.store());
  const bool found = found_inf_.item<float>() != 0.f;  // the one host read of the step
  stage_ = Stage::Stepped;
  last_skipped_ = found;
  if (found) {
    ++skipped_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!o_.enabled) return;
  Y9_CHECK(stage_ != Stage::Ready, "No inf checks were recorded prior to update.");
  auto k = engine::kernel(kernels::kAmpUpdateScale, engine::DType::F32, device_);
  k.fn(k.ctx, scale_.data<float>(), growth_tracker_.data<int32_t>(), found_inf_.data<float>(), o_.growth_factor,
       o_.backoff_factor, static_cast<int32_t>(o_.growth_interval));
  stage_ = Stage::Ready;
}

double GradScaler::get_scale() const { return o_.enabled ? static_cast<double>(scale_.item<float>()) : 1.0; }

int64_t GradScaler::growth_tracker() const { return o_.enabled ? growth_tracker_.item<int32_t>() : 0; }

std::map<std::string, Tensor> GradScaler::state_dict() const {
  std::map<std::string, Tensor> sd;
  if (!o_.enabled) return sd;
  auto scalar = [](double v) { return Tensor::full({}, v, engine::DType::F64); };
  sd["scale"] = scalar(get_scale());
  sd["growth_factor"] = scalar(o_.growth_factor);
  sd["backoff_factor"] = scalar(o_.backoff_factor);
  sd["growth_interval"] = scalar(static_cast<double>(o_.growth_interval));
  sd["_growth_tracker"] = scalar(static_cast<double>(growth_tracker()));
  return sd;
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& sd) {
  if (!o_.enabled) return;
  Y9_CHECK(!sd.empty(), "The source state dict is empty, possibly because it was saved from a disabled instance "
                        "of GradScaler.");
  auto get = [&](const char* key) {
    auto it = sd.find(key);
    Y9_CHECK(it != sd.end(), "GradScaler::load_state_dict: missing key '", key, "'");
    return it->second.item<double>();
  };
  const double scale = get("scale");
  o_.growth_factor = get("growth_factor");
  o_.backoff_factor = get("backoff_factor");
  o_.growth_interval = static_cast<int64_t>(get("growth_interval"));
  const double tracker = get("_growth_tracker");
  engine::autograd::NoGradGuard ng;
  scale_.fill_(static_cast<double>(static_cast<float>(scale)));
  growth_tracker_.fill_(tracker);
  stage_ = Stage::Ready;
}

ScaledStepResult scaled_optimizer_step(GradScaler& scaler, Optimizer& opt, ModelEMA& ema, double max_norm) {
  ScaledStepResult r;
  scaler.unscale(opt.store());
  // The norm stays on the device until the optimizer step and the EMA update are queued.
  const Tensor norm = clip_grad_norm_async(opt.store(), max_norm);
  r.stepped = scaler.step(opt);
  scaler.update();
  opt.zero_grad();
  ema.update();  // official: also after a skipped step
  r.grad_norm = static_cast<double>(norm.item<float>());
  return r;
}

}  // namespace training
