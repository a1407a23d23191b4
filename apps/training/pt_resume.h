// `yolov9 train --resume last.pt` of an official train_dual.py run: its options (opt.yaml of the
// run folder, else ckpt['opt']) as our TrainOptions, and its torch.optim state (ckpt['optimizer'])
// as the named state of our Optimizer. The mapping from torch's integer parameter ids to our
// parameter names is the official smart_optimizer order: torch numbers the parameters group by
// group in the order they were added, and our official_param_split builds the same three groups
// (biases, decayed weights, normalisation weights) in the same model.modules() order.
// Source: train_dual.py (main: the --resume branch; train: smart_resume), utils/torch_utils.py
// (smart_optimizer, smart_resume), torch.optim.Optimizer.state_dict (PyTorch 1.13). Every
// function here is a pure conversion: bitwise reproducible, no flag needed.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/training/optim.h"
#include "apps/training/trainer.h"
#include "engine/tensor.h"
#include "io/torch_pt.h"

namespace training {

/// The official options `official` (vars(opt) of train_dual.py, as opt.yaml or ckpt['opt'] holds
/// them; the same names as our flags) as TrainOptions. Its `hyp` dict is returned in `hyp` (null
/// when absent). An entry whose value our option cannot take (None for --evolve or --cache, a bool
/// for --upload_dataset, resume False) keeps our default; unknown entries are ignored.
/// `source` names the file in messages. Errors: engine::ConfigError naming `source` when
/// `official` is not an object.
TrainOptions options_from_official(const nlohmann::json& official, nlohmann::json& hyp, const std::string& source);

/// A YAML document (yaml.safe_load semantics for the scalars an opt.yaml holds: null/~, true/false,
/// integers, floats, strings) as JSON. Errors: engine::ConfigError naming `source` on a parse error.
nlohmann::json yaml_text_to_json(const std::string& text, const std::string& source);

/// ckpt['optimizer'] as Optimizer::load_state_dict takes it for `opt`, an optimizer built by
/// make_official_optimizer over the same model (3 groups: biases, decayed weights, norm weights):
/// - "param_groups.<g>.{lr,initial_lr,weight_decay,momentum,nesterov,dampening}" (F64 0-d) from the
///   file's group g (momentum: SGD's momentum, else beta1 of `betas`);
/// - "state.<name>.<buffer>" (F32, the parameter's shape) and "state.<name>.step" (F64 0-d) for
///   every parameter id with state, id k being the k-th parameter of our groups taken in order.
///   SGD keeps no step count: a parameter with a momentum_buffer gets step 1 (it has stepped, so
///   the next update blends the buffer; PyTorch tests `buf is None`).
/// Errors: engine::ConfigError naming `file` and the parameter when the group count or a group's
/// size differs, a buffer's shape differs from its parameter's, or the buffers do not fit the
/// optimizer kind (a momentum_buffer for Adam, a missing exp_avg_sq, ...).
std::map<std::string, engine::Tensor> torch_optimizer_state_dict(const io::PtOptimizerState& st, const Optimizer& opt,
                                                                 const std::string& file);

}  // namespace training
