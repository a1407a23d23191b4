// Tensor methods that run kernels (copy_, fill_, add_, mul_, expand's backward, host transfers):
// they call the backend of the tensor's device (engine/core_kernels.h), never a kernel directly.
#include <cstring>

#include "engine/autograd.h"
#include "engine/core_kernels.h"
#include "engine/cuda_runtime.h"
#include "engine/layout.h"
#include "engine/tensor.h"

namespace engine {

namespace {
void check_inplace_allowed(const Tensor& t, const char* op) {
  Y9_CHECK(!(autograd::grad_enabled() && t.is_leaf() && t.requires_grad()), op,
           ": in-place change of a leaf that requires grad (", t.str(), "); wrap it in NoGradGuard");
  // The bytes change: whatever kernels derived from a frozen storage is stale from here.
  if (const auto& s = t.storage(); s && s->frozen()) s->note_write();
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace_allowed(*this, "copy_");
  if (numel() == 0) return *this;
  auto dl = layout_for(*this, shape(), "copy_");
  if (src.device() != device()) {
    // Cross-device: bring a contiguous copy of src (in its own dtype) across, then convert here.
    Tensor s = src.contiguous();
    Tensor staged = Tensor::empty(s.shape(), s.dtype(), device());
    memcpy_between_devices(staged.data_ptr(), device(), s.data_ptr(), s.device(),
                           static_cast<size_t>(s.numel()) * dtype_size(s.dtype()));
    return copy_(staged);
  }
  auto sl = layout_for(src, shape(), "copy_");
  auto k = kernel(kCopyStrided, dtype(), device());
  k.fn(k.ctx, data_ptr(), dtype(), dl, src.data_ptr(), src.dtype(), sl);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace_allowed(*this, "fill_");
  if (numel() == 0) return *this;
  auto l = layout_for(*this, shape(), "fill_");
  auto k = kernel(kFillStrided, dtype(), device());
  k.fn(k.ctx, data_ptr(), dtype(), l, value);
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace_allowed(*this, "add_");
  check_same_device({*this, other}, "add_");
  if (numel() == 0) return *this;
  Tensor o = other.dtype() == dtype() ? other : other.to(dtype());
  auto dl = layout_for(*this, shape(), "add_");
  auto sl = layout_for(o, shape(), "add_");
  auto k = kernel(kAxpyStrided, dtype(), device());
  k.fn(k.ctx, data_ptr(), dtype(), dl, o.data_ptr(), sl, alpha);
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_inplace_allowed(*this, "mul_");
  if (numel() == 0) return *this;
  auto l = layout_for(*this, shape(), "mul_");
  auto k = kernel(kScaleStrided, dtype(), device());
  k.fn(k.ctx, data_ptr(), dtype(), l, value);
  return *this;
}

Tensor Tensor::expand(const Shape& shape_in) const {
  Y9_CHECK_SHAPE(shape_in.size() >= static_cast<size_t>(dim()), "expand: cannot expand ", str(), " to ",
                 shape_str(shape_in));
  Shape target = shape_in;
  size_t lead = target.size() - static_cast<size_t>(dim());
  for (size_t i = lead; i < target.size(); ++i)
    if (target[i] == -1) target[i] = shape()[i - lead];
  auto l = layout_for(*this, target, "expand");
  Shape st(l.strides, l.strides + l.ndim);
  Tensor out = make_view(storage(), offset(), target, st, dtype());
  Shape in_shape = shape();
  autograd::record_fn("ExpandBackward", {*this}, {out}, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], in_shape)};
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
    memcpy_between_devices(dst.data_ptr(), dst.device(), src, Device::cpu(), nbytes);
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
