// Tensor-level helpers shared by engine's tensor methods and by ops/: NumPy broadcasting, kernel
// layouts of (broadcast) tensors, device checks, and the non-differentiable sum used by the
// backward of broadcasting. Everything that computes goes through the backend (sum_rows).
#pragma once
#include <vector>

#include "engine/strided_layout.h"
#include "engine/tensor.h"

namespace engine {

/// NumPy broadcasting of two shapes; throws ShapeError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

/// Layout of `t` iterated over `shape` (t must broadcast to shape: missing leading dims and
/// size-1 dims get stride 0). Throws ShapeError when it does not broadcast or ndim > kMaxDims.
StridedLayout layout_for(const Tensor& t, const Shape& shape, const char* op);

/// Throws ShapeError unless every defined tensor is on the same device as the first.
void check_same_device(const std::vector<Tensor>& ts, const char* op);

/// `x` detached and contiguous (a copy only when x is strided), without recording autograd:
/// the input a kernel reads, or a tensor an autograd node saves.
Tensor contiguous_nograd(const Tensor& x);

/// Sum of `x` over `dims` (negative allowed; empty = all dims), times `scale`, WITHOUT autograd:
/// the reduced dims are permuted last, made contiguous and reduced row by row by the backend's
/// sum_rows entry (fixed order per output element: deterministic). Result drops reduced dims
/// unless `keepdim`. Throws ShapeError on a bad dim, NotSupportedError on a dtype the device's
/// sum_rows lacks (CPU: f32, f64).
Tensor reduce_sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, double scale = 1.0);

/// Sums `g` over broadcast dims so the result has `shape` (the backward of broadcasting).
/// Not recorded by autograd (it runs inside backward nodes).
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace engine
