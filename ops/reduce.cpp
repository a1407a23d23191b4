// sum / mean: permute reduced dims last, make contiguous, reduce rows; backward broadcasts.
#include "ops/reduce.h"

#include <algorithm>

#include "engine/autograd.h"
#include "kernels/cpu/reduce.h"
#include "ops/layout.h"

#if defined(Y9_WITH_CUDA)
#include "engine/cuda_runtime.h"
#include "kernels/cuda/reduce.h"
#endif

namespace ops {

using engine::Shape;
using engine::Tensor;

namespace {

Tensor reduce_impl(const Tensor& x, std::vector<int64_t> dims, bool keepdim, bool is_mean, const char* op) {
  const bool half = x.dtype() == engine::DType::F16 || x.dtype() == engine::DType::BF16;
  Y9_CHECK_SHAPE(x.dtype() == engine::DType::F32 || x.dtype() == engine::DType::F64 || (half && x.device().is_cuda()),
                 op, ": dtype must be f32 or f64 (or f16/bf16 on cuda), got ", x.str());
  const int64_t nd = x.dim();
  std::vector<bool> red(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(x.wrap_dim(d))] = true;
  std::vector<int64_t> perm;
  Shape out_shape, kept_shape;
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (!red[d]) {
      perm.push_back(d);
      rows *= x.size(d);
      out_shape.push_back(x.size(d));
      kept_shape.push_back(x.size(d));
    } else {
      kept_shape.push_back(1);
    }
  }
  for (int64_t d = 0; d < nd; ++d)
    if (red[d]) {
      perm.push_back(d);
      n *= x.size(d);
    }
  Tensor xin;
  {
    engine::autograd::NoGradGuard ng;
    xin = x.permute(perm).contiguous();
  }
  Tensor out = Tensor::empty(keepdim ? kept_shape : out_shape, x.dtype(), x.device());
  double scale = is_mean ? (n > 0 ? 1.0 / static_cast<double>(n) : 0.0) : 1.0;
  if (x.device().is_cpu()) {
    if (x.dtype() == engine::DType::F32)
      kernels::cpu::sum_rows_cpu(xin.data<float>(), out.data<float>(), rows, n, scale);
    else
      kernels::cpu::sum_rows_cpu(xin.data<double>(), out.data<double>(), rows, n, scale);
  } else {
#if defined(Y9_WITH_CUDA)
    kernels::cuda::sum_rows_cuda(xin.data_ptr(), out.data_ptr(), x.dtype(), rows, n, scale,
                                 kernels::cuda::current_stream(x.device().index));
#else
    Y9_THROW(engine::Error, op, ": ", x.str(), " is on cuda but this build has no CUDA backend");
#endif
  }
  Shape in_shape = x.shape();
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
  return reduce_impl(x, std::move(dims), keepdim, false, "sum");
}
Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return reduce_impl(x, std::move(dims), keepdim, true, "mean");
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  size_t lead = g.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < g.shape().size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  }
  if (dims.empty()) return g.reshape(shape);
  Tensor s = sum(g, dims, true);
  // drop the leading dims that `shape` does not have
  return s.reshape(shape);
}

}  // namespace ops
