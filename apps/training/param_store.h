// The flat parameters and gradients of a model for the whole run (guide 3.9, after llm.c):
// one flat buffer holds every parameter value, a second one with the same layout holds every
// gradient. The model's parameter handles are re-pointed at their slices, and autograd
// accumulates straight into the gradient slices, so the optimizer, the gradient clip, the EMA
// and (next) the bucketed all-reduce each run as a few fused calls over these buffers.
//
// Layout (fixed for the run, documented for the gradient reducer): segments in the order the
// parameters are given (the model's named_parameters order = official registration order),
// each starting at a 256-byte boundary (engine::kFlatAlignBytes); padding is zero and stays
// zero. The gradient buffer mirrors the parameter buffer; frozen parameters (requires_grad
// false) keep a zero gradient segment but no grad view, so optimizers skip them as PyTorch does.
// A reducer buckets the gradient buffer from the end towards the start (reverse registration
// order is roughly the order in which backward produces the gradients).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/flat_params.h"
#include "engine/tensor.h"
#include "kernels/common/optim.h"

namespace training {

using engine::Tensor;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class ParamStore {
 public:
  /// Packs `params` (all defined leaves, one dtype and device, unique names and tensors) into a
  /// new flat parameter buffer, re-points every handle at its slice (values copied), allocates
  /// the zeroed gradient buffer and sets the grad of every trainable parameter to its slice.
  /// Call after --freeze and weight loading, before the first forward. Errors: engine::Error on
  /// an empty list, an undefined or non-leaf tensor, mixed dtype/device, or a duplicate.
  explicit ParamStore(const NamedTensors& params);
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  size_t size() const { return names_.size(); }
  const std::string& name(size_t i) const { return names_.at(i); }
  /// The parameter handle (a view into params()).
  const Tensor& param(size_t i) const { return tensors_.at(i); }
  bool trainable(size_t i) const { return trainable_.at(i); }
  const engine::FlatSegment& segment(size_t i) const { return params_.segments.at(i); }
  /// Index of the parameter with this handle (same TensorImpl) or name; throws engine::Error when
  /// it is not in the store.
  size_t index_of(const Tensor& p) const;
  size_t index_of(const std::string& name) const;
  /// (name, handle) of every parameter, in layout order.
  NamedTensors named_params() const;

  const engine::FlatBuffer& params() const { return params_; }
  const engine::FlatBuffer& grads() const { return grads_; }
  /// The gradient slice of parameter i (also for frozen parameters: zeros).
  Tensor grad_segment(size_t i) const { return grads_.segment_view(i); }
  /// Zeroes the whole gradient buffer (one fill; PyTorch 1.13 zero_grad(set_to_none=False)).
  void zero_grad();

  /// Ranges (offset, n) of the given segments in the flat buffers, adjacent segments merged
  /// across their zero padding (fewer, longer ranges for the fused kernels).
  std::vector<kernels::FlatRange> ranges(const std::vector<size_t>& segments) const;

 private:
  std::vector<std::string> names_;
  std::vector<Tensor> tensors_;
  std::vector<bool> trainable_;
  std::unordered_map<const engine::TensorImpl*, size_t> by_impl_;
  std::unordered_map<std::string, size_t> by_name_;
  engine::FlatBuffer params_, grads_;
};

}  // namespace training
