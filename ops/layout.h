// Helpers that turn tensors into kernel layouts: broadcasting and StridedLayout construction.
#pragma once
#include <vector>

#include "engine/tensor.h"
#include "kernels/common/strided.h"

namespace ops {

/// NumPy broadcasting of two shapes; throws engine::ShapeError naming `op` and both shapes.
engine::Shape broadcast_shapes(const engine::Shape& a, const engine::Shape& b, const char* op);

/// Layout of `t` iterated over `shape` (t must broadcast to shape: missing leading dims and
/// size-1 dims get stride 0). Throws ShapeError when it does not broadcast or ndim > kMaxDims.
kernels::StridedLayout layout_for(const engine::Tensor& t, const engine::Shape& shape, const char* op);

/// Throws ShapeError unless every defined tensor is on the same device as the first.
void check_same_device(const std::vector<engine::Tensor>& ts, const char* op);

/// `x` detached and contiguous (a copy only when x is strided), without recording autograd:
/// the input a CPU kernel reads, or a tensor an autograd node saves.
engine::Tensor contiguous_nograd(const engine::Tensor& x);

/// Sums `g` over broadcast dims so the result has `shape` (the backward of broadcasting).
engine::Tensor sum_to(const engine::Tensor& g, const engine::Shape& shape);

}  // namespace ops
