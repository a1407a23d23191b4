// Strided N-d layouts passed by value to CPU and CUDA kernels (no tensors in kernels/): sizes
// and element strides of one operand over a common iteration shape.
#pragma once
#include <cstdint>

#include "engine/hd.h"

namespace engine {

constexpr int kMaxDims = 8;

/// Sizes and element strides of one operand over a common iteration shape (broadcast dims have
/// stride 0). `ndim` <= kMaxDims; dims are row-major (last is fastest).
struct StridedLayout {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

/// Element offset of row-major linear index `i` in `l`.
Y9_HD int64_t strided_offset(const StridedLayout& l, int64_t i) {
  int64_t off = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    int64_t s = l.sizes[d];
    int64_t q = i / s;
    off += (i - q * s) * l.strides[d];
    i = q;
  }
  return off;
}

}  // namespace engine
