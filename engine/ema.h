// Model exponential moving average (official utils/torch_utils.py ModelEMA, after "Mean teachers
// are better role models", Tarvainen & Valpola, NeurIPS 2017, with a ramped decay): a copy of
// every state_dict tensor (parameters and buffers), blended after each optimizer step. No autograd.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace engine {

/// EMA over named tensors. Float entries (F32; F16/F64/BF16 via generic tensor ops) are averaged;
/// integer entries (num_batches_tracked) are copied at construction and then left alone, as
/// officially. Not thread-safe. Determinism: bitwise reproducible on CPU.
class ModelEMA {
 public:
  /// Deep-copies `state` (model.state_dict() order and names; any device, kept on it; the copy is
  /// contiguous). decay d(u) = decay * (1 - exp(-u / tau)); `updates` restores a checkpoint's
  /// counter. Errors: engine::Error on an undefined tensor or a duplicate name.
  ModelEMA(const std::vector<std::pair<std::string, Tensor>>& state, double decay = 0.9999, double tau = 2000.0,
           int64_t updates = 0);

  /// One update from the model's current state (same names and shapes as at construction; extra
  /// model entries are ignored, a missing one throws engine::Error; shape mismatch
  /// engine::ShapeError): updates += 1; d = decay_at(updates); for every float entry
  /// ema = ema*d + (1-d)*model in the entry's dtype (d and 1-d rounded to it, as PyTorch does
  /// for `v *= d; v += (1 - d) * msd[k]`). Returns d.
  double update(const std::vector<std::pair<std::string, Tensor>>& model_state);

  /// d(u) = decay * (1 - exp(-u / tau)) in double.
  double decay_at(int64_t updates) const;
  int64_t updates() const { return updates_; }
  void set_updates(int64_t u) { updates_ = u; }
  /// EMA tensors in construction order (mutable: checkpoint loading, the FP16 rounding that
  /// validation under AMP applies officially).
  const std::vector<std::pair<std::string, Tensor>>& state() const { return state_; }
  /// The EMA tensor named `name`; throws engine::Error when absent.
  const Tensor& at(const std::string& name) const;

 private:
  std::vector<std::pair<std::string, Tensor>> state_;
  double decay_, tau_;
  int64_t updates_;
};

/// Rounds every floating-point tensor in `tensors` through FP16 once, in place (official
/// train_dual.py `model.half().float()` before training, and the EMA rounding of validation under
/// AMP): x = float(half(x)) with round-to-nearest-even, overflow to inf. Integer tensors untouched.
void round_through_fp16_(const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace engine
