// Reverse-mode automatic differentiation: a tape of nodes recorded during forward, executed by
// backward() in reverse topological order (most recent node first) with gradient accumulation.
// Saved tensors are released as soon as a node has run, so peak memory of backward holds only
// what the remaining nodes need.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace engine::autograd {

class Node;

/// Where a gradient flows: input `input_nr` of node `fn`. An edge with no fn carries nothing.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

/// One recorded operation. apply() receives one gradient per forward output (undefined when
/// that output got none) and returns one gradient per forward input (undefined = no gradient),
/// in the order of next_edges.
class Node {
 public:
  Node();
  virtual ~Node() = default;
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  /// Drops saved tensors; called right after apply() unless the graph is retained.
  virtual void release_saved() {}
  virtual std::string name() const = 0;

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  /// Creation order; backward runs higher numbers first (PyTorch's sequence_nr rule).
  uint64_t sequence_nr = 0;
  /// Shapes/dtypes/devices of the forward outputs, to materialise zero gradients when needed.
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
  std::vector<Device> output_devices;
};

/// A node whose backward is a closure. The closure owns the saved tensors; release_saved()
/// destroys it. Capture forward *outputs* only through detach() to avoid reference cycles.
class FunctionNode final : public Node {
 public:
  using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  void release_saved() override { fn_ = nullptr; }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  BackwardFn fn_;
};

/// Accumulates the incoming gradient into a leaf's .grad and then fires its grad-ready hooks.
class AccumulateGrad final : public Node {
 public:
  /// The highest sequence number (PyTorch's rule for AccumulateGrad): a leaf's gradient is
  /// accumulated, and its grad-ready hooks fire, as soon as every edge into it has delivered,
  /// not after every newer node (the node is created at the leaf's first use, so its creation
  /// order would put it last). The gradients are unchanged: the node runs once, on the sum its
  /// edges delivered in the same order as before; only the moment of the accumulation moves,
  /// which lets the data-parallel reducer start a bucket's all-reduce while backward goes on.
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {
    sequence_nr = std::numeric_limits<uint64_t>::max();
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

/// Whether operations record the tape (thread-local; true by default).
bool grad_enabled();
void set_grad_enabled(bool enabled);

/// RAII: disables recording in its scope (inference, optimizer steps, EMA).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// True when grad mode is on and any defined input requires grad.
bool needs_grad(const std::vector<Tensor>& inputs);

/// The edge a gradient for `t` should flow into: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

/// Records `node` as the creator of `outputs` with `inputs` as its differentiable inputs.
/// Call only when needs_grad(inputs). Sets next_edges, output metadata and each output's grad_fn.
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs);

/// Shorthand: records a FunctionNode named `name` when needs_grad(inputs); no-op otherwise.
void record_fn(const char* name, const std::vector<Tensor>& inputs,
               const std::vector<Tensor>& outputs, FunctionNode::BackwardFn fn);

/// Runs backward from `roots` seeded with `grads` (one per root; an undefined grad means ones
/// for a one-element root). Throws engine::Error when a root does not require grad.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

}  // namespace engine::autograd
