// Module registration and traversal (PyTorch nn.Module naming and state_dict order).
#include "graph/module.h"

#include <algorithm>
#include <unordered_set>

#include "engine/autograd.h"
#include "engine/error.h"

namespace graph {

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool trainable) {
  t.set_requires_grad(trainable);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

int64_t Module::to(engine::Device device) {
  engine::autograd::NoGradGuard no_grad;
  std::unordered_set<const engine::TensorImpl*> done;
  int64_t moved = 0;
  auto move = [&](const Tensor& t) {
    if (!t.defined() || t.device() == device || !done.insert(t.impl()).second) return;
    Y9_CHECK(t.is_leaf(), "Module::to: tensor ", t.str(), " is not a leaf (it has a grad_fn)");
    Tensor d = t.detach().to(device).contiguous();
    engine::TensorImpl* impl = t.impl();
    impl->storage = d.storage();
    impl->offset = d.offset();
    impl->strides = d.strides();
    Tensor g = t.grad();
    if (g.defined() && g.device() != device) t.set_grad(g.detach().to(device).contiguous());
    ++moved;
  };
  for (const auto& [n, t] : named_parameters()) move(t);
  for (const auto& [n, t] : named_buffers()) move(t);
  return moved;
}

void Module::remove_module(const std::string& name) {
  auto it = std::find_if(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  Y9_CHECK_T(engine::InternalError, it != children_.end(), type_name(), ": no child module '", name, "'");
  children_.erase(it);
}

void Module::collect(const std::string& prefix, bool params, bool buffers, bool interleave,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", params, buffers, interleave, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(const std::string& prefix) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect(prefix, true, false, false, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(const std::string& prefix) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect(prefix, false, true, false, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict(const std::string& prefix) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect(prefix, true, true, true, out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out{{prefix, this}};
  for (const auto& [n, c] : children_) {
    auto sub = c->named_modules(prefix.empty() ? n : prefix + "." + n);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

}  // namespace graph
