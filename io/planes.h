// Model input from a letterboxed image: interleaved BGR uint8 -> [1, 3, H, W] F32 RGB in [0, 1],
// in one pass and into a reused buffer (the detect path's preprocessing; official detect_dual.py:
// im = im.transpose((2, 0, 1))[::-1]; im = torch.from_numpy(im).float(); im /= 255).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/tensor.h"

namespace io {

/// A reusable host buffer for bgr_to_rgb_planes_f32: the storage of the last returned tensor.
struct PlanesBuffer {
  std::shared_ptr<engine::Storage> storage;
};

/// Writes rows x cols interleaved BGR uint8 pixels (row r at bgr + r * row_step bytes) as a CPU
/// tensor [1, 3, rows, cols] F32, channel 0 = R, 1 = G, 2 = B, each value float(v) / 255.0f: the
/// same bits as (u8 planes).to(F32) / 255 through ops::div. With `buffer`, the storage of its
/// previous result is overwritten and returned as a new tensor when it has the same size in bytes
/// and no tensor still views it (no allocation in steady state); otherwise new storage is
/// allocated and kept there. The caller drops the previous result before the next call to reuse.
/// Throws engine::ShapeError when rows or cols < 1 or row_step < 3 * cols, engine::Error on a null
/// pointer.
engine::Tensor bgr_to_rgb_planes_f32(const uint8_t* bgr, int64_t rows, int64_t cols, size_t row_step,
                                     PlanesBuffer* buffer = nullptr);

}  // namespace io
