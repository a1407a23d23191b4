// Reductions: sum and mean over dimensions (differentiable).
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace ops {

/// Sum over `dims` (negative allowed; empty = all dims). x: any shape, F32/F64 (CPU) or
/// F32/F16/BF16 (CUDA, accumulated in F32). Result drops reduced dims unless `keepdim`.
/// Accumulates in double on the CPU (deterministic: fixed order per output element).
/// Throws engine::ShapeError on a bad dim or dtype.
engine::Tensor sum(const engine::Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
/// Mean over `dims`; same rules as sum.
engine::Tensor mean(const engine::Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);

}  // namespace ops
