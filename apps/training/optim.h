// Optimizers over parameter groups of a ParamStore (flat parameter and gradient buffers), with
// PyTorch 1.13 semantics: SGD (momentum, dampening, nesterov, L2 weight decay), Adam (L2), AdamW
// (decoupled, optional amsgrad) and Lion (official utils/lion.py). A step is one fused kernel
// call per parameter group (kernels/common/optim.h entries of the store's device) over the
// group's ranges of the flat buffers; the state buffers share the store's layout. The official
// YOLOv9 3-group construction (utils/torch_utils.py smart_optimizer) is make_official_optimizer;
// which parameter is a bias / a normalisation weight is decided by the caller
// (apps/training/param_groups.h for the detection model).
#pragma once
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/training/param_store.h"
#include "engine/tensor.h"

namespace training {

/// One parameter group (torch.optim param_groups entry). Its parameters must belong to the
/// optimizer's ParamStore; parameters without a gradient (frozen, requires_grad false) are
/// skipped (PyTorch: `p.grad is None`).
struct ParamGroup {
  NamedTensors params;
  double lr = 0.01;
  /// SGD momentum; for Adam/AdamW/Lion this is beta1 (the official code passes
  /// betas=(momentum, 0.999) / (momentum, 0.99)). Warm-up interpolates it for SGD only.
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  double dampening = 0.0;   ///< SGD only
  double initial_lr = 0.0;  ///< LambdaLR base lr (set by training::LambdaLR; official 'initial_lr')
};

/// --optimizer choices of train_dual.py.
enum class OptimizerKind { SGD, Adam, AdamW, Lion };

/// Parses "SGD", "Adam", "AdamW", "LION" (official spelling; case-insensitive).
/// Throws engine::ConfigError on anything else.
OptimizerKind parse_optimizer_kind(const std::string& name);
const char* optimizer_kind_name(OptimizerKind kind);

/// Base optimizer over a ParamStore. Not thread-safe. Determinism: steps are bitwise
/// reproducible (pointwise kernels).
class Optimizer {
 public:
  explicit Optimizer(ParamStore& store) : store_(store) {}
  virtual ~Optimizer() = default;
  virtual OptimizerKind kind() const = 0;
  /// Whether the groups carry an SGD-style 'momentum' entry that warm-up interpolates
  /// (official: `if 'momentum' in x`). True for SGD only.
  virtual bool warmup_momentum() const { return false; }

  ParamStore& store() const { return store_; }
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  /// Appends a group (torch add_param_group). Throws engine::Error on a parameter that is not in
  /// the store, one that is already in a group, or a call after the first step().
  void add_param_group(ParamGroup group);

  /// One update of every trainable parameter, group by group: one fused kernel call per group
  /// (per step count, when loaded state left parameters of a group at different steps). State
  /// buffers (one flat buffer per kind, the store's layout) are allocated zeroed on the first
  /// step. Thaws the store's flat parameters first (engine::Storage::note_write: the fused
  /// kernels write them through raw pointers, and a frozen store's kept weight layouts must be
  /// derived again). Errors: engine::NotSupportedError when the store's dtype/device has no kernel.
  void step();
  /// Zeroes the store's gradient buffer (PyTorch 1.13 zero_grad(set_to_none=False)).
  void zero_grad() { store_.zero_grad(); }

  /// Optimizer state as named tensors: "state.<param>.<buffer>" (buffers: momentum_buffer;
  /// exp_avg, exp_avg_sq, max_exp_avg_sq; exp_avg for Lion), "state.<param>.step" (F64 0-d) and
  /// "param_groups.<i>.{lr,momentum,weight_decay,initial_lr,nesterov,dampening}" (F64 0-d).
  /// Only parameters that have taken a step have state (as in PyTorch).
  std::map<std::string, Tensor> state_dict() const;
  /// Restores what state_dict() wrote into an optimizer with the same groups and parameter
  /// names. Throws engine::Error on a shape mismatch or a group count mismatch.
  void load_state_dict(const std::map<std::string, Tensor>& sd);

  /// The state buffer `buffer` of parameter `name` (undefined when it has none yet).
  Tensor state(const std::string& name, const std::string& buffer) const;
  /// Steps taken by parameter `name` (0 when none).
  int64_t state_step(const std::string& name) const;

 protected:
  /// Names of the state buffers this optimizer keeps per parameter (for the given group).
  virtual std::vector<std::string> state_buffers(const ParamGroup& g) const = 0;
  /// One fused update of `ranges` (of the store's flat buffers), all at `step_before` steps.
  /// `state` holds the start of each state buffer, in state_buffers order.
  virtual void update(const ParamGroup& g, const std::vector<kernels::FlatRange>& ranges, int64_t step_before,
                      const std::vector<float*>& state) = 0;
  float* params_base() const;
  const float* grads_base() const;

 private:
  /// The flat state buffer of kind `buffer` (created zeroed on first use).
  engine::FlatBuffer& state_buffer(const std::string& buffer);
  ParamStore& store_;
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<size_t>> members_;     // per group: store indices of its trainable params
  std::map<size_t, int64_t> steps_;              // store index -> steps taken (absent = 0)
  std::map<std::string, engine::FlatBuffer> state_;
  bool stepped_ = false;
};

/// torch.optim.SGD (PyTorch 1.13 single-tensor path): d_p = g + wd*p; buf = d_p on a
/// parameter's first step, else momentum*buf + (1-dampening)*d_p; nesterov: d_p += momentum*buf,
/// else d_p = buf; p -= lr*d_p.
class SGD final : public Optimizer {
 public:
  explicit SGD(ParamStore& store) : Optimizer(store) {}
  OptimizerKind kind() const override { return OptimizerKind::SGD; }
  bool warmup_momentum() const override { return true; }

 protected:
  std::vector<std::string> state_buffers(const ParamGroup& g) const override;
  void update(const ParamGroup& g, const std::vector<kernels::FlatRange>& ranges, int64_t step_before,
              const std::vector<float*>& state) override;
};

/// torch.optim.Adam / AdamW (PyTorch 1.13 single-tensor path, "Adam: A Method for Stochastic
/// Optimization", Kingma & Ba, ICLR 2015; AdamW: "Decoupled Weight Decay Regularization",
/// Loshchilov & Hutter, ICLR 2019). beta1 = group.momentum, beta2 and eps fixed per optimizer.
class Adam final : public Optimizer {
 public:
  /// decoupled = AdamW. Official: Adam(beta2 0.999, amsgrad false); AdamW(0.999, amsgrad true).
  Adam(ParamStore& store, bool decoupled, double beta2 = 0.999, double eps = 1e-8, bool amsgrad = false)
      : Optimizer(store), decoupled_(decoupled), beta2_(beta2), eps_(eps), amsgrad_(amsgrad) {}
  OptimizerKind kind() const override { return decoupled_ ? OptimizerKind::AdamW : OptimizerKind::Adam; }
  double beta2() const { return beta2_; }
  bool amsgrad() const { return amsgrad_; }

 protected:
  std::vector<std::string> state_buffers(const ParamGroup& g) const override;
  void update(const ParamGroup& g, const std::vector<kernels::FlatRange>& ranges, int64_t step_before,
              const std::vector<float*>& state) override;

 private:
  bool decoupled_;
  double beta2_, eps_;
  bool amsgrad_;
};

/// Lion ("Symbolic Discovery of Optimization Algorithms", Chen et al., 2023; official
/// utils/lion.py after lucidrains/lion-pytorch): p *= 1 - lr*wd; p -= lr*sign(beta1*m +
/// (1-beta1)*g); m = beta2*m + (1-beta2)*g. beta1 = group.momentum.
class Lion final : public Optimizer {
 public:
  explicit Lion(ParamStore& store, double beta2 = 0.99) : Optimizer(store), beta2_(beta2) {}
  OptimizerKind kind() const override { return OptimizerKind::Lion; }

 protected:
  std::vector<std::string> state_buffers(const ParamGroup& g) const override;
  void update(const ParamGroup& g, const std::vector<kernels::FlatRange>& ranges, int64_t step_before,
              const std::vector<float*>& state) override;

 private:
  double beta2_;
};

/// The official three parameter lists (utils/torch_utils.py smart_optimizer): biases (no decay),
/// weights with decay, normalisation-layer weights (no decay), each in the given order.
struct OfficialParamSplit {
  NamedTensors bias;   ///< every parameter whose last name component is "bias"
  NamedTensors decay;  ///< every other parameter (conv/linear weights, incl. frozen ones)
  NamedTensors norm;   ///< "weight" parameters of normalisation layers
};

/// Splits `params` (model.modules() order, i.e. named_parameters order) by the official rule:
/// name ends in ".bias" (or is "bias") -> bias; is_norm_weight(name) -> norm; else decay.
OfficialParamSplit split_official_param_groups(const NamedTensors& params,
                                               const std::function<bool(const std::string&)>& is_norm_weight);

/// Builds the optimizer over `store` as official smart_optimizer(model, name, lr, momentum,
/// decay) does:
/// group 0 = biases (weight_decay 0), group 1 = decayed weights (weight_decay = decay),
/// group 2 = norm weights (weight_decay 0); lr = lr, momentum = momentum in every group
/// (beta1 for Adam/AdamW/Lion); SGD nesterov = true; Adam betas (momentum, 0.999); AdamW betas
/// (momentum, 0.999) amsgrad = true; Lion betas (momentum, 0.99). Group order matters for
/// warm-up (group 0 gets warmup_bias_lr) and for the logged x/lr0..2 columns.
std::unique_ptr<Optimizer> make_official_optimizer(OptimizerKind kind, ParamStore& store,
                                                   const OfficialParamSplit& split, double lr, double momentum,
                                                   double decay);

/// Official nominal-batch accumulation: max(round_half_even(nbs / batch_size), 1) (train_dual.py).
int64_t official_accumulate(int64_t batch_size, int64_t nbs = 64);
/// Official scaled weight decay: weight_decay * batch_size * accumulate / nbs.
double official_weight_decay(double weight_decay, int64_t batch_size, int64_t accumulate, int64_t nbs = 64);

}  // namespace training
