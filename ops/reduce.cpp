// sum / mean (differentiable): engine::reduce_sum (reduced dims permuted last, made contiguous,
// reduced row by row by the backend's sum_rows entry) plus the autograd node, whose backward
// broadcasts the gradient back.
#include "ops/reduce.h"

#include "engine/autograd.h"
#include "engine/layout.h"

namespace ops {

using engine::Shape;
using engine::Tensor;

namespace {

Tensor reduce_impl(const Tensor& x, std::vector<int64_t> dims, bool keepdim, bool is_mean) {
  Y9_CHECK_SHAPE(x.defined(), is_mean ? "mean" : "sum", ": undefined input");
  std::vector<bool> red(static_cast<size_t>(x.dim()), dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(x.wrap_dim(d))] = true;
  Shape kept_shape;
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    kept_shape.push_back(red[static_cast<size_t>(d)] ? 1 : x.size(d));
    if (red[static_cast<size_t>(d)]) n *= x.size(d);
  }
  const double scale = is_mean ? (n > 0 ? 1.0 / static_cast<double>(n) : 0.0) : 1.0;
  Tensor out = engine::reduce_sum(x, dims, keepdim, scale);
  const Shape in_shape = x.shape();
  engine::autograd::record_fn(is_mean ? "MeanBackward" : "SumBackward", {x}, {out},
                              [in_shape, kept_shape, scale](const std::vector<Tensor>& g) {
                                Tensor gi = g[0].reshape(kept_shape).expand(in_shape).contiguous();
                                if (scale != 1.0) {
                                  gi = gi.clone();
                                  gi.mul_(scale);
                                }
                                return std::vector<Tensor>{gi};
                              });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return reduce_impl(x, std::move(dims), keepdim, false);
}
Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return reduce_impl(x, std::move(dims), keepdim, true);
}

}  // namespace ops
