// Tensor methods that run kernels (copy_, fill_, add_, mul_, expand, host transfers), dispatched
// on the tensor's device: kernels/cpu always, kernels/cuda when the CUDA backend is built.
#include <cstring>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "kernels/cpu/copy.h"
#include "ops/layout.h"
#include "ops/reduce.h"

#if defined(Y9_WITH_CUDA)
#include "engine/cuda_runtime.h"
#include "kernels/cuda/copy.h"
#endif

namespace ops {

using engine::Shape;
using engine::Tensor;

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    Y9_CHECK_SHAPE(da == db || da == 1 || db == 1, op, ": shapes ", engine::shape_str(a), " and ",
                   engine::shape_str(b), " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

kernels::StridedLayout layout_for(const Tensor& t, const Shape& shape, const char* op) {
  Y9_CHECK_SHAPE(shape.size() <= static_cast<size_t>(kernels::kMaxDims), op, ": ", shape.size(),
                 " dims exceed the limit of ", kernels::kMaxDims);
  Y9_CHECK_SHAPE(static_cast<size_t>(t.dim()) <= shape.size(), op, ": tensor of shape ",
                 engine::shape_str(t.shape()), " does not broadcast to ", engine::shape_str(shape));
  kernels::StridedLayout l;
  l.ndim = static_cast<int>(shape.size());
  size_t lead = shape.size() - static_cast<size_t>(t.dim());
  for (size_t i = 0; i < shape.size(); ++i) {
    l.sizes[i] = shape[i];
    if (i < lead) {
      l.strides[i] = 0;
    } else {
      int64_t s = t.shape()[i - lead];
      Y9_CHECK_SHAPE(s == shape[i] || s == 1, op, ": tensor of shape ", engine::shape_str(t.shape()),
                     " does not broadcast to ", engine::shape_str(shape));
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
    Y9_CHECK_SHAPE(t.device() == first->device(), op, ": tensors on different devices: ", first->str(),
                   " and ", t.str());
  }
}

Tensor contiguous_nograd(const Tensor& x) {
  engine::autograd::NoGradGuard ng;
  return x.detach().contiguous();
}

}  // namespace ops

namespace engine {

namespace {
void check_inplace_allowed(const Tensor& t, const char* op) {
  Y9_CHECK(!(autograd::grad_enabled() && t.is_leaf() && t.requires_grad()), op,
           ": in-place change of a leaf that requires grad (", t.str(), "); wrap it in NoGradGuard");
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace_allowed(*this, "copy_");
  if (numel() == 0) return *this;
  auto dl = ops::layout_for(*this, shape(), "copy_");
  if (src.device() != device()) {
    // Cross-device: bring a contiguous copy of src (in its own dtype) across, then convert here.
#if defined(Y9_WITH_CUDA)
    Tensor s = src.contiguous();
    Tensor staged = Tensor::empty(s.shape(), s.dtype(), device());
    kernels::cuda::memcpy_any(staged.data_ptr(), device(), s.data_ptr(), s.device(),
                              static_cast<size_t>(s.numel()) * dtype_size(s.dtype()));
    return copy_(staged);
#else
    Y9_THROW(Error, "copy_: cross-device copy ", src.str(), " -> ", str(), " needs the CUDA backend");
#endif
  }
  auto sl = ops::layout_for(src, shape(), "copy_");
  if (device().is_cpu()) {
    kernels::cpu::copy_strided_cpu(data_ptr(), dtype(), dl, src.data_ptr(), src.dtype(), sl);
  } else {
#if defined(Y9_WITH_CUDA)
    kernels::cuda::copy_strided_cuda(data_ptr(), dtype(), dl, src.data_ptr(), src.dtype(), sl,
                                     kernels::cuda::current_stream(device().index));
#endif
  }
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace_allowed(*this, "fill_");
  if (numel() == 0) return *this;
  auto l = ops::layout_for(*this, shape(), "fill_");
  if (device().is_cpu()) {
    kernels::cpu::fill_strided_cpu(data_ptr(), dtype(), l, value);
  } else {
#if defined(Y9_WITH_CUDA)
    kernels::cuda::fill_strided_cuda(data_ptr(), dtype(), l, value, kernels::cuda::current_stream(device().index));
#endif
  }
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace_allowed(*this, "add_");
  ops::check_same_device({*this, other}, "add_");
  if (numel() == 0) return *this;
  Tensor o = other.dtype() == dtype() ? other : other.to(dtype());
  auto dl = ops::layout_for(*this, shape(), "add_");
  auto sl = ops::layout_for(o, shape(), "add_");
  if (device().is_cpu()) {
    kernels::cpu::axpy_strided_cpu(data_ptr(), dtype(), dl, o.data_ptr(), sl, alpha);
  } else {
#if defined(Y9_WITH_CUDA)
    kernels::cuda::axpy_strided_cuda(data_ptr(), dtype(), dl, o.data_ptr(), sl, alpha,
                                     kernels::cuda::current_stream(device().index));
#endif
  }
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_inplace_allowed(*this, "mul_");
  if (numel() == 0) return *this;
  auto l = ops::layout_for(*this, shape(), "mul_");
  if (device().is_cpu()) {
    kernels::cpu::scale_strided_cpu(data_ptr(), dtype(), l, value);
  } else {
#if defined(Y9_WITH_CUDA)
    kernels::cuda::scale_strided_cuda(data_ptr(), dtype(), l, value, kernels::cuda::current_stream(device().index));
#endif
  }
  return *this;
}

Tensor Tensor::expand(const Shape& shape_in) const {
  Y9_CHECK_SHAPE(shape_in.size() >= static_cast<size_t>(dim()), "expand: cannot expand ", str(), " to ",
                 shape_str(shape_in));
  Shape target = shape_in;
  size_t lead = target.size() - static_cast<size_t>(dim());
  for (size_t i = lead; i < target.size(); ++i)
    if (target[i] == -1) target[i] = shape()[i - lead];
  auto l = ops::layout_for(*this, target, "expand");
  Shape st(l.strides, l.strides + l.ndim);
  Tensor out = make_view(storage(), offset(), target, st, dtype());
  Shape in_shape = shape();
  autograd::record_fn("ExpandBackward", {*this}, {out}, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{ops::sum_to(g[0], in_shape)};
  });
  return out;
}

namespace detail {

void copy_host_to_tensor(const void* src, const Tensor& dst) {
  Y9_ASSERT(dst.is_contiguous(), "copy_host_to_tensor needs a contiguous destination");
  size_t nbytes = static_cast<size_t>(dst.numel()) * dtype_size(dst.dtype());
  if (nbytes == 0) return;
  if (dst.device().is_cpu()) {
    std::memcpy(dst.data_ptr(), src, nbytes);
  } else {
#if defined(Y9_WITH_CUDA)
    kernels::cuda::memcpy_any(dst.data_ptr(), dst.device(), src, Device::cpu(), nbytes);
#endif
  }
}

void copy_tensor_to_host(const Tensor& t, DType dtype, void* dst) {
  if (t.numel() == 0) return;
  Tensor host = t.detach().to(Device::cpu());
  Tensor view = Tensor::from_blob(dst, t.shape(), dtype, Device::cpu());
  autograd::NoGradGuard ng;
  view.copy_(host);
}

}  // namespace detail

}  // namespace engine
