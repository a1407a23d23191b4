// Model exponential moving average (official utils/torch_utils.py ModelEMA, after "Mean teachers
// are better role models", Tarvainen & Valpola, NeurIPS 2017, with a ramped decay) over the
// model's flat buffers: the EMA keeps a copy of each flat buffer of floating model state (the
// ParamStore's parameter buffer, the packed BatchNorm statistics) and blends it with one fused
// ema_update call per buffer. No autograd, no per-tensor work in the step.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/flat_params.h"
#include "engine/tensor.h"

namespace training {

using engine::Tensor;

class ModelEMA {
 public:
  /// `flats`: the model's F32 flat buffers of floating state (blended whole, padding included);
  /// `state`: the model's named state in state_dict order. Every floating entry of `state` must
  /// lie inside one of `flats` (same storage); integer entries (num_batches_tracked) are copied
  /// once and then left alone, as officially. decay d(u) = decay * (1 - exp(-u / tau));
  /// `updates` restores a checkpoint's counter. Errors: engine::Error on an undefined tensor, a
  /// duplicate name, a floating entry outside the flats or a non-F32 flat.
  ModelEMA(const std::vector<engine::FlatBuffer>& flats, const std::vector<std::pair<std::string, Tensor>>& state,
           double decay = 0.9999, double tau = 2000.0, int64_t updates = 0);

  /// One update from the model's current flat buffers: updates += 1; d = decay_at(updates);
  /// ema = ema*d + (1-d)*model in F32 (d and 1-d rounded to float, as PyTorch does for
  /// `v *= d; v += (1 - d) * msd[k]`), one kernel call per flat buffer. Returns d.
  double update();

  /// d(u) = decay * (1 - exp(-u / tau)) in double.
  double decay_at(int64_t updates) const;
  int64_t updates() const { return updates_; }
  void set_updates(int64_t u) { updates_ = u; }
  /// EMA tensors in the model's state_dict order (views into the EMA's flat buffers, or copies of
  /// integer entries; writable: checkpoint loading, the FP16 rounding of validation under AMP).
  const std::vector<std::pair<std::string, Tensor>>& state() const { return state_; }
  /// The EMA tensor named `name`; throws engine::Error when absent.
  const Tensor& at(const std::string& name) const;

 private:
  std::vector<engine::FlatBuffer> model_flats_, ema_flats_;
  std::vector<std::pair<std::string, Tensor>> state_;
  double decay_, tau_;
  int64_t updates_;
};

/// Rounds every floating-point tensor in `tensors` through FP16 once, in place (official
/// train_dual.py `model.half().float()` before training, and the EMA rounding of validation under
/// AMP): x = float(half(x)) with round-to-nearest-even, overflow to inf. Integer tensors untouched.
void round_through_fp16_(const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace training
