// Reading PyTorch checkpoints (`torch.save` files, .pt) without Python or libtorch: the zip
// container (stored entries only, as torch.save writes them), the pickle subset torch.save emits
// (protocols 2-4: containers, numbers, strings, GLOBAL/REDUCE/NEWOBJ/BUILD, memo, persistent ids),
// tensors rebuilt from their raw storages, and the conversion of an official YOLOv9 checkpoint
// (train_dual.py: {'model': DetectionModel, 'ema', 'epoch', ...}) into an io::Checkpoint.
//
// Safety: NOTHING from the file is executed. GLOBAL only records a (module, name) pair; REDUCE,
// NEWOBJ and BUILD on an unknown class make a generic object that keeps its arguments and its
// state. Only a fixed set of pure data constructors is interpreted (tensor and parameter rebuild,
// OrderedDict, set, bytes from _codecs.encode). Every read is bounds-checked; recursion depth, memo
// size and stack size are capped.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tensor.h"
#include "io/checkpoint.h"

namespace io {

struct PtNode;
/// A pickle value: a node owned by its TorchPt (an arena, so that shared and cyclic values, which
/// the memo allows, neither leak nor recurse on destruction). Null stands for "absent".
using PtValue = PtNode*;

/// One unpickled value.
struct PtNode {
  enum class Kind { None, Bool, Int, Float, Str, Bytes, Tuple, List, Dict, Set, Global, Object, Storage, Tensor };
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                                  ///< Str, Bytes; Global: "module.name"
  std::vector<PtValue> items;                     ///< Tuple, List, Set; Object: constructor args
  std::vector<std::pair<PtValue, PtValue>> dict;  ///< Dict, in insertion order
  PtValue cls;                                    ///< Object: its class or callable (a Global)
  PtValue state;                                  ///< Object: the BUILD state (usually a Dict), or null
  engine::Tensor tensor;                          ///< Tensor (contiguous CPU, stored dtype)
  // Storage: the raw bytes of archive/data/<key> (a view of the file's bytes).
  const char* data = nullptr;
  size_t nbytes = 0;
  engine::DType dtype = engine::DType::F32;

  /// Dict lookup by string key (nullptr when absent or not a Dict).
  PtValue get(const std::string& key) const;
  /// Object: its state attribute `key` (state must be a Dict), else nullptr.
  PtValue attr(const std::string& key) const;
  bool is(Kind k) const { return kind == k; }
};

/// A parsed .pt file: the root value and the nodes it is made of. Tensors own their data (copied
/// out of the file), so the file's bytes may be freed.
struct TorchPt {
  std::string name;  ///< file path, for messages
  PtValue root = nullptr;
  std::shared_ptr<std::vector<std::unique_ptr<PtNode>>> nodes;  ///< owns every node
};

/// True when the first bytes are a zip local file header ("PK\x03\x04"), as every torch.save
/// file since PyTorch 1.6 starts.
bool is_zip_magic(const char* data, size_t size);
/// is_zip_magic on the first 4 bytes of `path` (false when unreadable).
bool is_torch_pt_file(const std::string& path);

/// Parses a torch.save archive held in memory; `name` names it in messages. Never reads past
/// `size`. Errors: engine::IoError naming `name` and what was found: not a zip archive, truncated
/// (no end of central directory, an entry past the end), a compressed entry, no data.pkl, a
/// pickle opcode that is not supported (its byte and offset), a stack underflow, a missing
/// storage entry, a tensor outside its storage, nesting or memo past the caps.
TorchPt parse_torch_pt(const char* data, size_t size, const std::string& name);

/// Reads `path` and parse_torch_pt's it. Errors: engine::IoError (missing, unreadable, and every
/// error of parse_torch_pt).
TorchPt load_torch_pt(const std::string& path);

/// The state_dict of a pickled torch.nn.Module object, as Module.state_dict() names it: walks
/// `_parameters`, `_buffers` (without `_non_persistent_buffers_set`) and `_modules` recursively,
/// with `prefix` before every name. Errors: engine::IoError naming `what` when `module` is not a
/// module object.
std::vector<std::pair<std::string, engine::Tensor>> pt_module_state_dict(const PtValue& module, const std::string& what,
                                                                         const std::string& prefix = "");

/// A pickled value as YAML text (dicts as maps in their order, lists and tuples as sequences,
/// None as null, strings plain so that our model-YAML parser reads them as yaml.safe_load + the
/// official eval would). Used for the model YAML dict a DetectionModel carries.
/// A tensor or an object (no place in a model YAML) is written as null. Errors: engine::IoError
/// (without a file name: callers add it) for nesting deeper than 100.
std::string pt_to_yaml(const PtValue& v);

/// Converts an official YOLOv9 checkpoint into an io::Checkpoint:
/// - model: the state_dict of ckpt['model'] (floating tensors as F32, num_batches_tracked I64);
/// - ema: the same of ckpt['ema'] when it is a model (official loaders prefer it);
/// - meta: source "torch-pt", cfg_yaml (the model's `yaml` dict as YAML text), cfg (its
///   yaml_file), nc, names (JSON list), epoch, best_fitness and updates when they are numbers, date.
/// A bare state_dict (a dict of tensors, or {'model': <dict of tensors>}) is taken as model weights
/// without metadata. `best_fitness` may be a number or a pickled NumPy float64 array of one value
/// (as train_dual.py saves it). The optimizer state is read by pt_optimizer_state, the options by
/// pt_to_json(root['opt']); meta "pt_optimizer" is "1" when ckpt['optimizer'] is not None.
/// Errors: engine::IoError naming `pt.name` when the file is not a YOLOv9 checkpoint (no
/// 'model'/'ema' module or state_dict).
Checkpoint torch_pt_checkpoint(const TorchPt& pt);

/// A torch.optim.Optimizer.state_dict() as the official train_dual.py saves it in ckpt['optimizer'].
struct PtOptimizerState {
  struct Group {
    /// The integer parameter ids of the group. torch numbers the parameters 0, 1, ... group by
    /// group, in the order they were added (official smart_optimizer: biases, decayed weights,
    /// normalisation weights, each in model.modules() order).
    std::vector<int64_t> params;
    /// The group's numeric entries: lr, initial_lr, momentum, dampening, weight_decay, eps, and
    /// 0/1 for the booleans nesterov, amsgrad, maximize; a `betas` tuple as beta1 and beta2.
    std::map<std::string, double> numbers;
  };
  std::vector<Group> groups;
  /// Parameter id -> its state: momentum_buffer (SGD), exp_avg, exp_avg_sq, max_exp_avg_sq
  /// (Adam/AdamW), exp_avg (Lion), as contiguous F32 CPU tensors of the parameter's shape; `step`
  /// (a 0-d tensor or a number in the file) as an F64 0-d tensor. Only parameters that have taken
  /// a step have an entry (PyTorch keeps no state for parameters without a gradient).
  std::map<int64_t, std::map<std::string, engine::Tensor>> state;
};

/// ckpt['optimizer'] of the official checkpoint `pt` (train_dual.py: optimizer.state_dict() of
/// utils/torch_utils.py smart_optimizer; torch.optim.Optimizer.state_dict, PyTorch 1.13). Errors: engine::IoError naming `pt.name`
/// when there is none (None: a stripped checkpoint, written at the end of training) or it is not
/// a state_dict ({'state': {int: {str: tensor|number}}, 'param_groups': [{'params': [int], ...}]}),
/// or a state entry names a parameter id no group holds.
PtOptimizerState pt_optimizer_state(const TorchPt& pt);

/// A pickled value as JSON: None null, bool, int, float (a NumPy float64 array of one value as
/// that number), str, list and tuple as arrays, dict with str keys as objects in their order
/// (other keys are written with their JSON text as the key); tensors, other objects and bytes
/// as null. Used for ckpt['opt'] (vars(opt) of train_dual.py). Errors: engine::IoError (without a
/// file name) for nesting deeper than 100 or more than 1,000,000 values (memo-shared lists count
/// each time they appear).
nlohmann::ordered_json pt_to_json(const PtValue& v);

/// load_torch_pt + torch_pt_checkpoint.
Checkpoint load_torch_checkpoint(const std::string& path);

}  // namespace io
