// Reductions: sum and mean over dimensions (differentiable).
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace ops {

/// Sum over `dims` (negative allowed; empty = all dims). x: any shape, any dtype the device's
/// sum_rows entry supports (CPU F32/F64, accumulated in double; CUDA F32/F64/F16/BF16,
/// accumulated in F32 or F64). Result drops reduced dims unless `keepdim`. Deterministic: fixed
/// order per output element. Throws engine::ShapeError on a bad dim, engine::NotSupportedError on
/// a dtype the device lacks. (The non-differentiable engine::sum_to / reduce_sum share the kernel.)
engine::Tensor sum(const engine::Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
/// Mean over `dims`; same rules as sum.
engine::Tensor mean(const engine::Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);

}  // namespace ops
