// io::Batch, the collated batch of the loader and the input of a training::Predictor. Its own
// header (engine types only, no OpenCV) so that the inference build without OpenCV can name it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace io {

/// One collated batch.
struct Batch {
  engine::Tensor images;   ///< [B, 3, H, W] U8, RGB, contiguous, CPU (pinned when the loader pins)
  engine::Tensor targets;  ///< [N, 6] F32 rows [image_index, class, cx, cy, w, h], box normalised
  std::vector<int64_t> indices;    ///< dataset indices
  std::vector<std::string> paths;  ///< image paths
};

}  // namespace io
