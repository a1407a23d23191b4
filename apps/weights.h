// Loading a model for val/detect from an engine checkpoint: a safetensors file holding the
// state_dict under official names ("model.0.conv.weight", ...), optionally an EMA copy under
// "ema." (train checkpoints; preferred as officially: attempt_load takes ckpt['ema'] if present),
// and metadata {cfg, nc, names}.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graph/model.h"

namespace apps {

/// A loaded model and what the checkpoint says about it.
struct LoadedModel {
  std::shared_ptr<graph::Model> model;  ///< in eval mode
  std::string cfg;                      ///< model YAML used
  std::vector<std::string> names;       ///< class names from metadata "names" (JSON list), may be empty
  bool ema = false;                     ///< the "ema." tensors were loaded
};

/// Loads `weights`. The model YAML is `cfg` when given, else the metadata "cfg" entry (a path; when
/// it does not exist, configs/models/<file name> is tried relative to the working directory).
/// nc: the metadata "nc" when present, else `nc_fallback` when > 0, else the YAML's. Throws engine::IoError naming the path
/// when the file is missing or unreadable, engine::ConfigError when no model YAML is known,
/// engine::ShapeError naming the first missing or mismatched tensor.
LoadedModel load_model(const std::string& weights, const std::string& cfg = "", int64_t nc_fallback = -1);

}  // namespace apps
