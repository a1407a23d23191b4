// YOLO-aware training set-up over the model's modules: the official optimizer parameter split
// (utils/torch_utils.py smart_optimizer: biases / decayed weights / normalisation weights) and
// --freeze (train_dual.py: parameter names containing "model.<i>." stop requiring gradients).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/training/optim.h"
#include "graph/module.h"

namespace training {

using graph::Module;

/// Predicate "is this parameter name the weight of a normalisation layer" for `root` (a module
/// whose type_name contains "Norm", like the official `'Norm' in k` over torch.nn classes).
/// Names are as root.named_parameters(prefix).
std::function<bool(const std::string&)> norm_weight_predicate(Module& root, const std::string& prefix = "");

/// The official three lists for `root`'s parameters, in model.modules() order:
/// bias (every ".bias"), decay (every other, incl. the frozen DFL conv weight), norm (BN weights).
OfficialParamSplit official_param_split(Module& root, const std::string& prefix = "");

/// Official --freeze prefixes: one value N -> "model.0." .. "model.N-1." (N = 0: none); several
/// values -> exactly "model.<v>." for each v.
std::vector<std::string> freeze_prefixes(const std::vector<int64_t>& freeze);

/// Sets requires_grad = false on every parameter whose name CONTAINS one of `prefixes` (official
/// `any(x in k for x in freeze)`, a substring test). Returns the frozen names (the official log
/// prints "freezing <name>" for each).
std::vector<std::string> apply_freeze(const std::vector<std::pair<std::string, Tensor>>& params,
                                      const std::vector<std::string>& prefixes);

}  // namespace training
