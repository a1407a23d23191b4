// Loading module state by official state_dict names ("model.3.cv1.conv.weight") from tensors in
// memory, including renaming maps such as the PGI re-parameterisation mapping of
// tools/reparameterization.ipynb (spec model.md section 7). Files are read and written one layer
// up (apps/training/weights.h): graph/ never touches files other than model YAMLs.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/module.h"

namespace graph {

/// How load_state_dict finds a module tensor in the source map.
struct LoadOptions {
  /// Prepended to every looked-up name (the fixtures store weights as "state.<name>").
  std::string prefix;
  /// Name prefix renames, applied to the module's own name before `prefix`: the first entry
  /// whose key is a prefix of the name replaces that prefix (e.g. "model.22.cv2." ->
  /// "model.29.cv4."). Empty: names are used as they are.
  std::vector<std::pair<std::string, std::string>> rename;
  /// Throw when the source holds tensors (under `prefix`) that no module tensor consumed.
  bool strict_unused = false;
};

/// Maps a module name through `opts.rename` and adds `opts.prefix`.
std::string source_name(const std::string& name, const LoadOptions& opts);

/// Copies every parameter and buffer of `m` (state_dict order) from `src` (any dtype/device;
/// converted to the module tensor's dtype and device). A source tensor matches when its shape
/// equals the module tensor's, or both hold one element (official num_batches_tracked is 0-d;
/// files written by numpy store it as [1]). Runs without recording autograd.
/// Errors: engine::ShapeError naming the first missing tensor ("missing tensor 'state.model.0...'
/// for 'model.0...'") or the first shape mismatch (name, file shape, model shape); with
/// strict_unused, engine::ShapeError naming the first unused source tensor. Nothing is partly
/// loaded on error: all names and shapes are checked before any copy.
void load_state_dict(Module& m, const std::map<std::string, Tensor>& src, const LoadOptions& opts = {});

}  // namespace graph
