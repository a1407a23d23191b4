// Broadcasting, kernel layouts of tensors, and the non-differentiable sum (engine/layout.h).
#include "engine/layout.h"

#include <algorithm>

#include "engine/autograd.h"
#include "engine/core_kernels.h"

namespace engine {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    Y9_CHECK_SHAPE(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                   " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

StridedLayout layout_for(const Tensor& t, const Shape& shape, const char* op) {
  Y9_CHECK_SHAPE(shape.size() <= static_cast<size_t>(kMaxDims), op, ": ", shape.size(), " dims exceed the limit of ",
                 kMaxDims);
  Y9_CHECK_SHAPE(static_cast<size_t>(t.dim()) <= shape.size(), op, ": tensor of shape ", shape_str(t.shape()),
                 " does not broadcast to ", shape_str(shape));
  StridedLayout l;
  l.ndim = static_cast<int>(shape.size());
  size_t lead = shape.size() - static_cast<size_t>(t.dim());
  for (size_t i = 0; i < shape.size(); ++i) {
    l.sizes[i] = shape[i];
    if (i < lead) {
      l.strides[i] = 0;
    } else {
      int64_t s = t.shape()[i - lead];
      Y9_CHECK_SHAPE(s == shape[i] || s == 1, op, ": tensor of shape ", shape_str(t.shape()),
                     " does not broadcast to ", shape_str(shape));
      l.strides[i] = (s == 1 && shape[i] != 1) ? 0 : t.strides()[i - lead];
    }
  }
  return l;
}

void check_same_device(const std::vector<Tensor>& ts, const char* op) {
  const Tensor* first = nullptr;
  for (const auto& t : ts) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
      continue;
    }
    Y9_CHECK_SHAPE(t.device() == first->device(), op, ": tensors on different devices: ", first->str(), " and ",
                   t.str());
  }
}

Tensor contiguous_nograd(const Tensor& x) {
  autograd::NoGradGuard ng;
  return x.detach().contiguous();
}

Tensor reduce_sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, double scale) {
  const int64_t nd = x.dim();
  std::vector<bool> red(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(x.wrap_dim(d))] = true;
  std::vector<int64_t> perm;
  Shape out_shape, kept_shape;
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (!red[static_cast<size_t>(d)]) {
      perm.push_back(d);
      rows *= x.size(d);
      out_shape.push_back(x.size(d));
      kept_shape.push_back(x.size(d));
    } else {
      kept_shape.push_back(1);
    }
  }
  for (int64_t d = 0; d < nd; ++d)
    if (red[static_cast<size_t>(d)]) {
      perm.push_back(d);
      n *= x.size(d);
    }
  auto k = kernel(kSumRows, x.dtype(), x.device());
  Tensor xin;
  {
    autograd::NoGradGuard ng;
    xin = x.detach().permute(perm).contiguous();
  }
  Tensor out = Tensor::empty(keepdim ? kept_shape : out_shape, x.dtype(), x.device());
  k.fn(k.ctx, xin.data_ptr(), out.data_ptr(), x.dtype(), rows, n, scale);
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  size_t lead = g.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < g.shape().size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  }
  if (dims.empty()) return g.reshape(shape);
  return reduce_sum(g, dims, true).reshape(shape);
}

}  // namespace engine
