#include "io/planes.h"

#include "engine/error.h"
#include "engine/storage.h"

namespace io {

using engine::DType;
using engine::Tensor;

Tensor bgr_to_rgb_planes_f32(const uint8_t* bgr, int64_t rows, int64_t cols, size_t row_step, PlanesBuffer* buffer) {
  Y9_CHECK_SHAPE(rows >= 1 && cols >= 1 && row_step >= static_cast<size_t>(3 * cols),
                 "bgr_to_rgb_planes_f32: expected rows, cols >= 1 and row_step >= 3 * cols, got rows ", rows,
                 ", cols ", cols, ", row_step ", row_step);
  Y9_CHECK(bgr != nullptr, "bgr_to_rgb_planes_f32: null image pointer");
  const engine::Shape shape{1, 3, rows, cols};
  Tensor out;
  if (buffer && buffer->storage && buffer->storage.use_count() == 1 &&
      buffer->storage->nbytes() == static_cast<size_t>(3 * rows * cols) * sizeof(float))
    out = Tensor::make_view(buffer->storage, 0, shape, engine::contiguous_strides(shape), DType::F32);
  else
    out = Tensor::empty(shape, DType::F32);
  float* r = out.data<float>();
  float* g = r + rows * cols;
  float* b = g + rows * cols;
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* s = bgr + static_cast<size_t>(y) * row_step;
    const int64_t o = y * cols;
    for (int64_t x = 0; x < cols; ++x) {
      b[o + x] = static_cast<float>(s[3 * x]) / 255.0f;
      g[o + x] = static_cast<float>(s[3 * x + 1]) / 255.0f;
      r[o + x] = static_cast<float>(s[3 * x + 2]) / 255.0f;
    }
  }
  if (buffer) buffer->storage = out.storage();
  return out;
}

}  // namespace io
