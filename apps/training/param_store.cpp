// ParamStore: flat parameter and gradient buffers of a model (apps/training/param_store.h).
#include "apps/training/param_store.h"

#include "engine/autograd.h"

namespace training {

ParamStore::ParamStore(const NamedTensors& params) {
  Y9_CHECK(!params.empty(), "ParamStore: empty parameter list");
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, t] = params[i];
    Y9_CHECK(t.defined(), "ParamStore: parameter '", name, "' is undefined");
    Y9_CHECK(by_name_.emplace(name, i).second, "ParamStore: parameter '", name, "' appears twice");
    Y9_CHECK(by_impl_.emplace(t.impl(), i).second, "ParamStore: the tensor of '", name,
             "' is also registered under another name");
    names_.push_back(name);
    tensors_.push_back(t);
    trainable_.push_back(t.requires_grad());
  }
  params_ = engine::pack_flat(params);  // checks dtype/device/leaves, re-points the handles
  engine::autograd::NoGradGuard ng;
  grads_ = engine::flat_zeros_like(params_);
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (trainable_[i]) tensors_[i].set_grad(grads_.segment_view(i));
}

size_t ParamStore::index_of(const Tensor& p) const {
  auto it = by_impl_.find(p.impl());
  Y9_CHECK(it != by_impl_.end(), "ParamStore: tensor ", p.str(), " is not one of the store's parameters");
  return it->second;
}

size_t ParamStore::index_of(const std::string& name) const {
  auto it = by_name_.find(name);
  Y9_CHECK(it != by_name_.end(), "ParamStore: no parameter named '", name, "'");
  return it->second;
}

NamedTensors ParamStore::named_params() const {
  NamedTensors out;
  out.reserve(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) out.emplace_back(names_[i], tensors_[i]);
  return out;
}

void ParamStore::zero_grad() {
  engine::autograd::NoGradGuard ng;
  grads_.flat.zero_();
}

std::vector<kernels::FlatRange> ParamStore::ranges(const std::vector<size_t>& segments) const {
  std::vector<kernels::FlatRange> out;
  for (size_t k = 0; k < segments.size(); ++k) {
    const size_t i = segments[k];
    const engine::FlatSegment& s = params_.segments.at(i);
    // Merge with the previous range when this segment is the next one in the layout: only zero
    // padding lies between them.
    if (!out.empty() && k > 0 && segments[k - 1] + 1 == i) {
      out.back().n = s.offset + s.numel - out.back().offset;
    } else {
      out.push_back({s.offset, s.numel});
    }
  }
  return out;
}

}  // namespace training
