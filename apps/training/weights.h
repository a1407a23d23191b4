// Model weights in files: module state to and from safetensors files by official state_dict names
// (graph/state.h does the in-memory matching), and loading a model for val/detect from an engine
// checkpoint: a safetensors file holding the state_dict under official names
// ("model.0.conv.weight", ...), optionally an EMA copy under "ema." (train checkpoints; preferred
// as officially: attempt_load takes ckpt['ema'] if present), and metadata {cfg, nc, names}.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/model.h"
#include "graph/state.h"

namespace training {

/// Reads a safetensors file (io::load_safetensors) and loads it into `m` with `opts`
/// (graph::load_state_dict; num_batches_tracked may be stored as [1]).
/// Errors: engine::IoError from reading `path`; the ShapeError of load_state_dict with `path`
/// in the message (first missing tensor, or first mismatch with the file's and the model's shapes).
void load_weights(graph::Module& m, const std::string& path, const graph::LoadOptions& opts = {});

/// Writes the state_dict of `m` (parameters and buffers, official names, stored dtypes;
/// num_batches_tracked as I64 0-d) to `path` atomically (io::save_safetensors), with `metadata`
/// in the header. Errors: engine::IoError when the file cannot be written.
void save_weights(const graph::Module& m, const std::string& path,
                  const std::map<std::string, std::string>& metadata = {});

/// save_weights of a whole model with the metadata {format, cfg (the config source), nc}.
void save_model_weights(const graph::Model& m, const std::string& path);

/// A loaded model and what the checkpoint says about it.
struct LoadedModel {
  std::shared_ptr<graph::Model> model;  ///< in eval mode
  std::string cfg;                      ///< model YAML used (ModelYaml::name)
  std::string stem;                     ///< model name for summaries ("gelan-t")
  std::vector<std::string> names;       ///< class names from metadata "names" (JSON list), may be empty
  bool ema = false;                     ///< the "ema." tensors were loaded
};

/// A model YAML: its text and a name for messages and summaries (a path, or "<weights> (embedded
/// model YAML <original path>)").
struct ModelYaml {
  std::string name;  ///< resolved path, or a label for the embedded text
  std::string stem;  ///< model name for summaries ("gelan-t")
  std::string text;
};

/// The model YAML that goes with a weights file whose metadata is `meta`: `cfg` when given (a
/// path or a bare name such as "yolov9-t.yaml", found by resolve_config, as train and info do);
/// else the YAML text the file carries (metadata "cfg_yaml", written by `yolov9 train` and
/// `yolov9 export`), so the original file need not exist any more; else the metadata "cfg" path,
/// resolved by resolve_config. Errors: engine::ConfigError naming `weights` when none is known;
/// engine::IoError from resolve_config naming every place searched.
ModelYaml weights_model_yaml(const std::map<std::string, std::string>& meta, const std::string& weights,
                             const std::string& cfg);

/// Loads `weights`. The model YAML: weights_model_yaml(meta, weights, cfg).
/// nc: the metadata "nc" when present, else `nc_fallback` when > 0, else the YAML's. Throws engine::IoError naming the path
/// when the file is missing, a directory or unreadable, engine::ConfigError when no model YAML
/// is known or the metadata "nc" is not a positive integer, engine::ShapeError naming the first
/// missing or mismatched tensor.
/// fuse: fold Conv+BN and RepConvN for inference (graph::fuse), as the official stand-alone
/// detect/val load through DetectMultiBackend -> attempt_load(fuse=True) (spec eval.md section 1).
LoadedModel load_model(const std::string& weights, const std::string& cfg = "", int64_t nc_fallback = -1,
                       bool fuse = false);

/// The metadata "nc" of a weights file as a positive integer, or -1 when absent. Errors:
/// engine::ConfigError naming `weights` when it is not an integer in 1..graph::kMaxClasses.
int64_t weights_meta_nc(const std::map<std::string, std::string>& meta, const std::string& weights);

}  // namespace training
