// Module tree with PyTorch-style registration: parameters, buffers and child modules in
// registration order, so that names and order equal the official state_dict
// (model.0.conv.weight, model.0.bn.running_mean, ...). Modules own their tensors; the Model
// (graph/model.h) owns the tree.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace graph {

using engine::Shape;
using engine::Tensor;

/// Channels and spatial size of a feature map, used by the analytic shape/FLOP trace.
struct Dims {
  int64_t c = 0, h = 0, w = 0;
};

/// Base of every module. Not copyable (parameters are shared handles).
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  /// Official class name ("Conv", "RepNCSPELAN4", "Conv2d", ...), used in summaries.
  virtual std::string type_name() const = 0;

  /// (name, tensor) of every parameter, depth-first in registration order, names prefixed with
  /// `prefix` ("model.3." style). Includes frozen parameters (the DFL conv weight).
  std::vector<std::pair<std::string, Tensor>> named_parameters(const std::string& prefix = "") const;
  /// (name, tensor) of every buffer (BatchNorm running_mean F32 [C], running_var F32 [C],
  /// num_batches_tracked I64 []), same order rules.
  std::vector<std::pair<std::string, Tensor>> named_buffers(const std::string& prefix = "") const;
  /// Parameters and buffers in PyTorch state_dict order: per module its own parameters, then its
  /// own buffers, then its children recursively.
  std::vector<std::pair<std::string, Tensor>> state_dict(const std::string& prefix = "") const;
  /// (name, module) of this module and every descendant, pre-order ("" for this one).
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");

  /// Training mode flag of this module and every descendant (BatchNorm batch statistics,
  /// detection head output form).
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  /// Moves every parameter and buffer of this module and its descendants to `device` (PyTorch
  /// nn.Module.to(device)), in place: each tensor handle (its TensorImpl) is re-pointed at a new
  /// contiguous copy on `device`, so holders of the handles (modules, parameter lists, hooks) see
  /// the moved tensor; shape, dtype, name, requires_grad and autograd identity are kept. Existing
  /// gradients are moved too. Tensors already on `device` are left alone (no copy). Call before
  /// ParamStore packing and before any forward records the tensors (views made earlier keep the
  /// old storage). A parameter shared by two modules moves once. Errors: engine::Error from the
  /// copy (e.g. no usable CUDA device for a cuda:N device, engine::NotSupportedError when the
  /// build has no backend for it). Returns the number of tensors moved.
  int64_t to(engine::Device device);

  /// Registered children, in order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

 protected:
  /// Registers a parameter. `trainable` false marks it frozen (requires_grad false), as the DFL
  /// conv weight is officially. Returns the stored handle.
  Tensor& register_parameter(const std::string& name, Tensor t, bool trainable = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  /// Removes the child `name` (like delattr on an nn.Module); used by the inference fusions.
  /// Throws engine::InternalError when there is no such child.
  void remove_module(const std::string& name);

 private:
  void collect(const std::string& prefix, bool params, bool buffers, bool interleave,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

/// An ordered container named by position ("0", "1", ...), like nn.Sequential / nn.ModuleList.
class ModuleList : public Module {
 public:
  explicit ModuleList(std::string type = "ModuleList") : type_(std::move(type)) {}
  std::string type_name() const override { return type_; }
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    items_.push_back(m);
    return register_module(std::to_string(items_.size() - 1), std::move(m));
  }
  size_t size() const { return items_.size(); }
  Module* at(size_t k) const { return items_.at(k).get(); }

 private:
  std::string type_;
  std::vector<std::shared_ptr<Module>> items_;
};

}  // namespace graph
