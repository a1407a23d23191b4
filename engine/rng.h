// Generator: a (seed, stream) pair with an advancing offset over the Philox stream. Tensor fills
// (uniform_, normal_) consume numel draws (rounded up to whole 4-lane blocks) and advance the
// offset, so the same seed gives the same tensors on CPU and CUDA, in any thread count.
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace engine {

/// Counter-based random generator. Not thread-safe: one per consumer (e.g. per data worker,
/// keyed by (seed, epoch, sample index) — style guide 3.7). Its whole state is three integers,
/// which checkpoints store.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t stream_id = 0) : seed_(seed), stream_(stream_id) {}
  uint64_t seed() const { return seed_; }
  uint64_t stream_id() const { return stream_; }
  /// Position in 4-lane blocks.
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t o) { offset_ = o; }
  /// Reserves `n` draws; returns the block offset where they start.
  uint64_t reserve(uint64_t n) {
    uint64_t start = offset_;
    offset_ += (n + 3) / 4;
    return start;
  }
  /// One uniform float in [0, 1) (draws one whole block).
  float next_uniform();

 private:
  uint64_t seed_, stream_, offset_ = 0;
};

/// Fills a contiguous floating tensor (F32/F64/F16/BF16, any device) with U[lo, hi).
/// Throws ShapeError for integer dtypes or non-contiguous tensors. Not recorded by autograd.
void uniform_(Tensor& t, Generator& gen, double lo = 0.0, double hi = 1.0);
/// Fills with N(mean, std^2) by Box-Muller on pairs of draws (lane 2k, 2k+1).
void normal_(Tensor& t, Generator& gen, double mean = 0.0, double std = 1.0);

}  // namespace engine
