// Training checkpoints (weights/last.safetensors, best.safetensors): one safetensors file holding
// the training model, its EMA, the optimizer state and (for an interrupted epoch) the accumulated
// gradients, each under its own name prefix, plus string metadata (epoch, best fitness, EMA
// update count, hyp and options as JSON, the model YAML text). The official train_dual.py writes
// the same items into a pickled .pt dictionary (spec train.md section 9).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "io/safetensors.h"

namespace io {

/// Name prefixes of the tensor groups inside a checkpoint file.
inline constexpr const char* kCkptModel = "model.";   ///< training model state_dict (F32)
inline constexpr const char* kCkptEma = "ema.";       ///< EMA state_dict (F32): the inference weights
inline constexpr const char* kCkptOptim = "optim.";   ///< engine::Optimizer::state_dict()
inline constexpr const char* kCkptGrad = "grad.";     ///< accumulated parameter grads (mid-epoch stop only)
/// Value of metadata["format"].
inline constexpr const char* kCkptFormat = "yolov9-checkpoint-1";

/// A checkpoint in memory. Tensor names inside each map are WITHOUT their prefix
/// (e.g. model["model.0.conv.weight"] is stored as "model.model.0.conv.weight").
struct Checkpoint {
  std::map<std::string, engine::Tensor> model, ema, optim, grad;
  /// String metadata. Keys written by `yolov9 train`: format, epoch (last completed epoch, -1
  /// none), next_batch (batches of epoch+1 already trained, 0 = epoch boundary), best_fitness,
  /// updates, last_opt_step, accumulate, mloss (JSON [3]), cfg (model YAML path), cfg_yaml (its
  /// text), nc, names (JSON list), opt (JSON of the options), hyp (JSON), date (ISO 8601),
  /// finished ("1" after the last epoch).
  std::map<std::string, std::string> meta;
};

/// Writes `ck` to `path` atomically (temporary file + rename, io::save_safetensors). Tensors are
/// stored with their dtype (bitwise, so a resumed run continues exactly). Sets meta["format"].
/// Errors: engine::IoError naming the path (directory missing or unwritable, disk full).
void save_checkpoint(const std::string& path, const Checkpoint& ck);

/// Reads a checkpoint written by save_checkpoint (metadata format = kCkptFormat). Any other
/// safetensors file (a bare state_dict, a `yolov9 export` file) is read as model weights: every
/// tensor goes to `model` under its own name ("model.0.conv.weight"). An official PyTorch .pt
/// (zip magic "PK\x03\x04") is converted by io::load_torch_checkpoint (model, ema, metadata
/// source=torch-pt, cfg_yaml, nc, names, epoch; the optimizer state is read by
/// io::pt_optimizer_state, as train --resume does).
/// Errors: engine::IoError (missing, a directory, truncated, not safetensors, a corrupt or
/// non-YOLOv9 .pt; see io::load_safetensors and io/torch_pt.h).
Checkpoint load_checkpoint(const std::string& path);

/// The weights of a file for inference or export, as a SafetensorsData: a safetensors file as
/// io::load_safetensors reads it; an official .pt as its inference weights (EMA over model, as
/// attempt_load; F32) under plain names, with the metadata of io::load_torch_checkpoint
/// (cfg_yaml, nc, names, ...; "ema" = "1" when the EMA was taken). Errors: those of both readers.
SafetensorsData load_weights_file(const std::string& path);

/// Checked reads of checkpoint metadata, for files that may be damaged or hand-edited. `path`
/// names the file in messages. meta_int: a decimal integer in [lo, hi]; meta_double: a finite
/// number; meta_str: present. Errors: engine::ConfigError "<path>: checkpoint metadata '<key>'
/// is missing" / "is not an integer ('abc')" / "is <v>, outside [lo, hi]".
int64_t meta_int(const Checkpoint& ck, const std::string& key, const std::string& path, int64_t lo, int64_t hi);
double meta_double(const Checkpoint& ck, const std::string& key, const std::string& path);
const std::string& meta_str(const Checkpoint& ck, const std::string& key, const std::string& path);

/// The weights to run inference with, as the official val/detect pick them
/// (`ckpt.get('ema') or ckpt['model']`): the EMA tensors when present, else the model tensors.
/// Throws engine::IoError when the checkpoint holds neither.
const std::map<std::string, engine::Tensor>& inference_weights(const Checkpoint& ck, const std::string& path = "");

/// Copies `src` into the same-named tensors of `dst` (a module's state_dict: names as
/// Module::state_dict()). Every entry of `dst` must exist in `src` with the same shape, else
/// engine::ConfigError naming the first mismatched tensor and both shapes (weights from another
/// model config). Values are converted to the destination dtype.
void load_state_into(const std::vector<std::pair<std::string, engine::Tensor>>& dst,
                     const std::map<std::string, engine::Tensor>& src, const std::string& what);

}  // namespace io
