// The autograd engine: graph recording helpers and the backward executor.
#include "engine/autograd.h"

#include <atomic>
#include <queue>
#include <unordered_map>

namespace engine::autograd {

namespace {
std::atomic<uint64_t> g_sequence{0};
thread_local bool t_grad_enabled = true;
}  // namespace

Node::Node() : sequence_nr(g_sequence.fetch_add(1, std::memory_order_relaxed)) {}

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grad_outputs) {
  Y9_CHECK(fn_ != nullptr, "autograd: ", name_,
           " was already run and its saved tensors released; call backward(retain_graph=true) "
           "to run the same graph twice");
  return fn_(grad_outputs);
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grad_outputs) {
  auto leaf = leaf_.lock();
  if (!leaf || !grad_outputs[0].defined()) return {};
  Tensor incoming = grad_outputs[0];
  Y9_ASSERT(incoming.shape() == leaf->shape, "AccumulateGrad: gradient shape ",
            shape_str(incoming.shape()), " != leaf shape ", shape_str(leaf->shape));
  if (!leaf->grad.defined()) {
    // Steal the buffer when nobody else can see it; otherwise copy so that a later in-place
    // accumulation cannot write into a tensor shared with another gradient.
    bool exclusive = incoming.impl_ptr().use_count() == 1 && incoming.storage().use_count() == 1 &&
                     incoming.is_contiguous() && incoming.dtype() == leaf->dtype;
    leaf->grad = exclusive ? incoming : incoming.to(leaf->dtype).clone();
  } else {
    leaf->grad.add_(incoming);
  }
  Tensor leaf_handle(leaf);
  for (auto& hook : leaf->grad_ready_hooks) hook(leaf_handle);
  return {};
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  TensorImpl* impl = t.impl();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr};
  if (impl->requires_grad) {
    if (!impl->grad_accumulator) impl->grad_accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
    return {impl->grad_accumulator, 0};
  }
  return {};
}

void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs) {
  node->next_edges.clear();
  node->next_edges.reserve(inputs.size());
  for (const auto& t : inputs) node->next_edges.push_back(gradient_edge(t));
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->output_shapes.clear();
  node->output_dtypes.clear();
  node->output_devices.clear();
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    node->output_shapes.push_back(o.shape());
    node->output_dtypes.push_back(o.dtype());
    node->output_devices.push_back(o.device());
    o.impl()->grad_fn = node;
    o.impl()->output_nr = i;
  }
}

void record_fn(const char* name, const std::vector<Tensor>& inputs,
               const std::vector<Tensor>& outputs, FunctionNode::BackwardFn fn) {
  if (!needs_grad(inputs)) return;
  record(std::make_shared<FunctionNode>(name, std::move(fn)), inputs, outputs);
}

// --- backward executor ------------------------------------------------------------------------

namespace {

struct ByNewest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

void accumulate(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = g;
  } else {
    // Out of place: `slot` may alias a gradient another node also received.
    Tensor sum = slot.clone();
    sum.add_(g);
    slot = sum;
  }
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  Y9_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(),
           " gradients");
  NoGradGuard no_grad;  // gradients of gradients are not supported: never record during backward

  // 1. Dependencies: how many edges point at each node reachable from the roots.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<Node*> stack;
  std::vector<std::shared_ptr<Node>> keep_alive;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    Y9_CHECK(r.defined() && r.requires_grad(), "backward: root ", i, " (", r.defined() ? r.str() : "undefined",
             ") does not require grad; no parameter or input on its path has requires_grad set");
    Edge e = gradient_edge(r);
    Tensor g = grads[i];
    if (!g.defined()) {
      Y9_CHECK(r.numel() == 1, "backward: an implicit gradient needs a one-element root, got ",
               shape_str(r.shape()), "; pass the gradient explicitly");
      g = Tensor::ones(r.shape(), r.dtype(), r.device());
    }
    Y9_CHECK_SHAPE(g.shape() == r.shape(), "backward: gradient shape ", shape_str(g.shape()),
                   " does not match root shape ", shape_str(r.shape()));
    auto& buf = buffers[e.fn.get()];
    if (buf.empty()) buf.resize(e.fn->num_outputs);
    accumulate(buf[e.input_nr], g);
    if (!deps.count(e.fn.get())) {
      deps[e.fn.get()] = 0;
      stack.push_back(e.fn.get());
      keep_alive.push_back(e.fn);
    }
  }
  std::vector<Node*> root_nodes = stack;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn) continue;
      auto it = deps.find(e.fn.get());
      if (it == deps.end()) {
        deps[e.fn.get()] = 1;
        stack.push_back(e.fn.get());
      } else {
        it->second++;
      }
    }
  }

  // 2. Execute: a node is ready when every edge into it has delivered; newest first.
  std::priority_queue<Node*, std::vector<Node*>, ByNewest> ready;
  for (Node* n : root_nodes)
    if (deps[n] == 0) ready.push(n);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> grad_outputs = std::move(buffers[n]);
    buffers.erase(n);
    grad_outputs.resize(n->num_outputs);
    bool any = false;
    for (const auto& g : grad_outputs) any = any || g.defined();
    std::vector<Tensor> grad_inputs;
    if (any) {
      // Outputs that received nothing (an unused chunk of a split) get zeros, so node
      // closures may assume every gradient is defined.
      for (uint32_t k = 0; k < grad_outputs.size(); ++k)
        if (!grad_outputs[k].defined() && k < n->output_shapes.size())
          grad_outputs[k] = Tensor::zeros(n->output_shapes[k], n->output_dtypes[k], n->output_devices[k]);
      grad_inputs = n->apply(std::move(grad_outputs));
    }
    if (!retain_graph) n->release_saved();
    Y9_ASSERT(grad_inputs.empty() || grad_inputs.size() == n->next_edges.size(), n->name(),
              " returned ", grad_inputs.size(), " gradients for ", n->next_edges.size(), " inputs");
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.fn) continue;
      if (i < grad_inputs.size() && grad_inputs[i].defined()) {
        auto& buf = buffers[e.fn.get()];
        if (buf.empty()) buf.resize(e.fn->num_outputs);
        accumulate(buf[e.input_nr], grad_inputs[i]);
      }
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
  }
}

}  // namespace engine::autograd
