// Feature-map grids of the official utils/plots.py feature_visualization (detect_dual.py
// --visualize; our train --plot-features): one PNG per stage of a model forward, written through
// graph::Model's layer observer (graph/model.h) so that the plain forward pays nothing.
#pragma once
#include <string>
#include <vector>

#include "apps/training/evaluator.h"
#include "engine/tensor.h"

namespace graph {
class Model;
}

namespace training {

/// Runs `model` once on x [1, 3, H, W] (F32 RGB in [0, 1], H and W multiples of 32; the model's
/// train/eval mode is left as it is, no autograd) and writes, for every layer before the
/// detection head whose output has H > 1 and W > 1 (official rule), the grid of its first `n`
/// channels (io::plot_feature_maps) to dir/stage<i>_<type>_features.png (<type> = the official
/// class name: Conv, RepNCSPELAN4, ADown, Concat, Upsample, ...). A CBLinear's pieces are shown
/// as their concatenation (its conv output; the official feature_visualization would fail on the
/// tuple). Creates `dir`. Returns the files written, in layer order. Throws engine::IoError naming
/// a file that cannot be written, engine::ShapeError from the forward.
std::vector<std::string> save_feature_maps(graph::Model& model, const engine::Tensor& x, const std::string& dir,
                                           int n = 32);

/// model_predictor(model) that also writes each image's grids (save_feature_maps) to
/// increment_path(save_dir / <stem of batch.paths[0]>, mkdir) (official detect_dual.py:
/// visualize = increment_path(save_dir / Path(path).stem, mkdir=True)), in the same forward.
/// The model must outlive the predictor. Sets model.eval().
Predictor visualizing_predictor(graph::Model& model, const std::string& save_dir, int n = 32);

/// The network input of one image file for a feature plot: read, letterboxed to imgsz x imgsz
/// (grey 114 padding, no stride trimming), RGB planes / 255 as [1, 3, imgsz, imgsz] F32 on the
/// host. Throws engine::IoError naming the path when it cannot be read.
engine::Tensor letterboxed_input(const std::string& image_path, int imgsz);

}  // namespace training
