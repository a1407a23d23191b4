// Dynamic loss scaling for mixed-precision training (issue 11): PyTorch's
// torch.cuda.amp.GradScaler (torch/cuda/amp/grad_scaler.py, PyTorch 1.13) as the official
// train_dual.py uses it, with PyTorch's defaults (init_scale 2^16, growth_factor 2, backoff_factor
// 0.5, growth_interval 2000):
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer); clip_grad_norm_(model.parameters(), max_norm=10.0);
//   scaler.step(optimizer); scaler.update(); optimizer.zero_grad(); ema.update(model)
// (scaled_optimizer_step below is that sequence). The scale, its inverse, the found-inf flag and
// the growth tracker live on the gradients' device; unscale and update run as the kernel entries
// of kernels/common/amp.h (amp_unscale = _amp_foreach_non_finite_check_and_unscale_,
// amp_update_scale = _amp_update_scale_), so the only host read of a step is the found-inf flag in
// step() (PyTorch: `found_inf.item()` in scaler.step).
//
// Skipped steps: when any unscaled gradient is inf/NaN, step() does not call the optimizer
// (parameters and optimizer state unchanged), update() multiplies the scale by backoff_factor and
// resets the growth tracker; after growth_interval consecutive finite steps the scale is multiplied
// by growth_factor (kept only when finite). The EMA still updates on a skipped step (official:
// ema.update(model) follows scaler.step unconditionally).
//
// A disabled scaler (AMP off: CPU training, --no-amp) is a pass-through, as PyTorch's
// GradScaler(enabled=False): scale() returns the loss itself, unscale() and update() do nothing,
// step() always steps; numerics are exactly those of the unscaled path.
//
// Checkpoints: the official train_dual.py does not save the scaler (../shared/spec/train.md 9:
// the checkpoint holds epoch, best_fitness, model, ema, updates, optimizer, opt, git, date), so a
// resumed run starts again from init_scale; state_dict()/load_state_dict() exist for callers that
// want PyTorch's GradScaler.state_dict() (keys scale, growth_factor, backoff_factor,
// growth_interval, _growth_tracker).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "apps/training/ema.h"
#include "apps/training/optim.h"
#include "apps/training/param_store.h"
#include "engine/device.h"
#include "engine/tensor.h"

namespace training {

/// Mixed-precision mode of a training run.
enum class AmpMode { Off, FP16, BF16 };
const char* amp_mode_name(AmpMode m);  ///< "off", "fp16", "bf16"

/// The run's AMP mode from the --amp option value ("auto": the official `amp = check_amp(model)`,
/// on iff training on CUDA, FP16; "fp16" / "bf16": forced; "off": --no-amp) and whether training
/// runs on CUDA. AMP is CUDA-only in the official code: on the CPU the result is Off, and *notice
/// (when not null) explains why a forced mode was dropped, except "bf16" on a CPU with native BF16
/// (`cpu_bf16`: ops::cpu_bf16_convolutions), an extension: BF16, the convolutions computing in BF16
/// with F32 accumulation and everything else in F32 (ops/autocast.h cpu_bf16_conv), *notice
/// saying so. Only FP16 uses loss scaling (the GradScaler): BF16 has FP32's exponent range, so it
/// runs with a disabled scaler, as PyTorch's bf16 autocast. Throws engine::ConfigError on another
/// value.
AmpMode resolve_amp_mode(const std::string& flag, bool cuda_training, std::string* notice = nullptr,
                         bool cpu_bf16 = false);

/// GradScaler constructor arguments (PyTorch defaults).
struct GradScalerOptions {
  double init_scale = 65536.0;  ///< 2.0**16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  /// A scaler whose state lives on `device` (the gradients' device). Throws engine::ConfigError
  /// when growth_factor <= 1, backoff_factor not in (0, 1), growth_interval < 1 or init_scale <= 0
  /// (PyTorch asserts the first two).
  explicit GradScaler(engine::Device device, GradScalerOptions o = {});

  bool enabled() const { return o_.enabled; }
  const GradScalerOptions& options() const { return o_; }

  /// scaler.scale(loss): loss * scale, differentiable, in F32 (an F16/BF16 loss is converted
  /// first: PyTorch's F32 scale tensor promotes it); the loss itself when disabled.
  Tensor scale(const Tensor& loss) const;

  /// scaler.unscale_(optimizer): zeroes the found-inf flag, then multiplies the gradients of the
  /// store's trainable parameters by float(1 / double(scale)) in place and records whether any
  /// was inf/NaN (on the device). At most once per step (engine::Error on a second call before
  /// update(), as PyTorch's "unscale_() has already been called on this optimizer since the
  /// last update()"). No-op when disabled.
  void unscale(const ParamStore& store);

  /// scaler.step(optimizer): unscales first when unscale() was not called this step; reads the
  /// found-inf flag (the one host read) and calls opt.step() only when every gradient was
  /// finite. Returns whether the optimizer stepped (always true when disabled).
  bool step(Optimizer& opt);

  /// scaler.update(): the device-side scale/growth-tracker update from this step's found-inf flag
  /// (amp_update_scale); ends the step. Throws engine::Error when no unscale/step happened since
  /// the last update ("No inf checks were recorded prior to update."). No-op when disabled.
  void update();

  /// Current scale (a host read; 1.0 when disabled, as PyTorch's get_scale()).
  double get_scale() const;
  /// Consecutive finite steps since the last growth or back-off (a host read; 0 when disabled).
  int64_t growth_tracker() const;
  /// Optimizer steps skipped because of inf/NaN gradients since construction.
  int64_t skipped_steps() const { return skipped_; }
  /// Whether the last step() skipped the optimizer.
  bool last_step_skipped() const { return last_skipped_; }

  /// PyTorch's GradScaler.state_dict(): "scale", "growth_factor", "backoff_factor",
  /// "growth_interval", "_growth_tracker" as F64 0-d CPU tensors (empty when disabled).
  std::map<std::string, Tensor> state_dict() const;
  /// Restores state_dict(); throws engine::Error on a missing key or an empty dict.
  void load_state_dict(const std::map<std::string, Tensor>& sd);

 private:
  GradScalerOptions o_;
  engine::Device device_;
  Tensor scale_;           // F32 [1]
  Tensor growth_tracker_;  // I32 [1]
  Tensor found_inf_;       // F32 [1]
  enum class Stage { Ready, Unscaled, Stepped } stage_ = Stage::Ready;
  int64_t skipped_ = 0;
  bool last_skipped_ = false;
};

/// Result of one scaled_optimizer_step.
struct ScaledStepResult {
  double grad_norm = 0.0;  ///< clip_grad_norm_'s total (before clipping; inf/NaN on a skipped step)
  bool stepped = true;     ///< false when the scaler skipped the optimizer step
};

/// The official optimizer step of train_dual.py: scaler.unscale_(optimizer);
/// clip_grad_norm_(max_norm); scaler.step(optimizer); scaler.update(); optimizer.zero_grad();
/// ema.update() (also on a skipped step). With a disabled scaler this is exactly clip, step,
/// zero_grad, EMA update. The clipping runs on the device (clip_grad_norm_async) and its norm is
/// read to the host only after the optimizer step and the EMA update are queued; an enabled
/// scaler's step() still reads found_inf to the host before it queues the optimizer (the skip
/// decision, as torch's GradScaler.step does with found_inf.item()).
ScaledStepResult scaled_optimizer_step(GradScaler& scaler, Optimizer& opt, ModelEMA& ema, double max_norm);

}  // namespace training
