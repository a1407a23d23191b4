// Tensor metadata, factories and views. View ops record autograd nodes whose backward is another
// view or a copy; the methods that run kernels are in engine/tensor_methods.cpp.
#include "engine/tensor.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <sstream>

#include "engine/autograd.h"

namespace engine {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) {
    int64_t r;
    Y9_CHECK_SHAPE(v >= 0, "negative size in shape ", shape_str(s));
    Y9_CHECK_SHAPE(!__builtin_mul_overflow(n, v, &r), "shape ", shape_str(s), " has more than 2^63 elements");
    n = r;
  }
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

// --- metadata -------------------------------------------------------------------------------

const TensorImpl& Tensor::checked() const {
  Y9_CHECK(impl_ != nullptr, "use of an undefined tensor");
  return *impl_;
}
const Shape& Tensor::shape() const { return checked().shape; }
const Shape& Tensor::strides() const { return checked().strides; }
int64_t Tensor::offset() const { return checked().offset; }
int64_t Tensor::dim() const { return static_cast<int64_t>(checked().shape.size()); }
int64_t Tensor::numel() const { return shape_numel(checked().shape); }
DType Tensor::dtype() const { return checked().dtype; }
Device Tensor::device() const { return checked().storage->device(); }
const std::shared_ptr<Storage>& Tensor::storage() const { return checked().storage; }

void record_stream(const Tensor& t, StreamKind stream) {
  Y9_CHECK(t.defined(), "record_stream: undefined tensor");
  t.storage()->record_stream(stream);
}

int64_t Tensor::wrap_dim(int64_t d, bool for_insert) const {
  int64_t n = dim() + (for_insert ? 1 : 0);
  int64_t w = d < 0 ? d + n : d;
  Y9_CHECK_SHAPE(w >= 0 && w < std::max<int64_t>(n, 1), "dimension ", d, " out of range for tensor of shape ",
                 shape_str(shape()));
  return w;
}
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d)]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d)]; }

bool Tensor::is_contiguous() const {
  const auto& t = checked();
  if (shape_numel(t.shape) == 0) return true;
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(t.shape.size()) - 1; i >= 0; --i) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const auto& t = checked();
  if (!t.storage->data()) return nullptr;
  return static_cast<char*>(t.storage->data()) + t.offset * static_cast<int64_t>(dtype_size(t.dtype));
}

std::string Tensor::str() const {
  if (!impl_) return "Tensor(undefined)";
  return "Tensor" + shape_str(shape()) + " " + dtype_name(dtype()) + " " + device().str();
}

void Tensor::check_dtype(DType expected, const char* what) const {
  Y9_CHECK_SHAPE(dtype() == expected, what, ": expected dtype ", dtype_name(expected), ", got ", str());
}

// --- factories ------------------------------------------------------------------------------

Tensor Tensor::make_view(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Shape strides,
                         DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) Y9_CHECK_SHAPE(s >= 0, "Tensor::empty: negative size in shape ", shape_str(shape));
  const int64_t n = shape_numel(shape);  // throws on overflow
  size_t nbytes = 0;
  Y9_CHECK_SHAPE(!__builtin_mul_overflow(static_cast<size_t>(n), dtype_size(dtype), &nbytes), "Tensor::empty: shape ",
                 shape_str(shape), " of ", dtype_name(dtype), " needs more bytes than fit in size_t");
  auto storage = std::make_shared<Storage>(nbytes, device);
  return make_view(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(0.0);
  return t;
}
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(1.0);
  return t;
}
Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0);
  Tensor t = from_vector(v, {n});
  return t.to(dtype).to(device);
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device,
                         std::function<void(void*)> deleter) {
  size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(data, nbytes, device, std::move(deleter));
  return make_view(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

// --- autograd accessors -----------------------------------------------------------------------

bool Tensor::requires_grad() const {
  const auto& t = checked();
  return t.requires_grad || t.grad_fn != nullptr;
}
Tensor& Tensor::set_requires_grad(bool value) {
  Y9_CHECK(is_leaf(), "set_requires_grad: only leaves can be marked (", str(), " was produced by ",
           "an operation); use detach() first");
  Y9_CHECK(!value || is_floating(dtype()), "set_requires_grad: integer tensor ", str(), " cannot require grad");
  impl_->requires_grad = value;
  return *this;
}
const Tensor& Tensor::grad() const { return checked().grad; }
void Tensor::set_grad(const Tensor& g) const {
  Y9_CHECK_SHAPE(!g.defined() || g.shape() == shape(), "set_grad: gradient ", g.str(), " for tensor ", str());
  impl_->grad = g;
}
const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const { return checked().grad_fn; }
uint32_t Tensor::output_nr() const { return checked().output_nr; }
bool Tensor::is_leaf() const { return checked().grad_fn == nullptr; }
void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}
void Tensor::register_grad_ready_hook(std::function<void(const Tensor&)> hook) const {
  Y9_CHECK(is_leaf(), "register_grad_ready_hook: ", str(), " is not a leaf");
  impl_->grad_ready_hooks.push_back(std::move(hook));
}

Tensor Tensor::detach() const {
  const auto& t = checked();
  return make_view(t.storage, t.offset, t.shape, t.strides, t.dtype);
}

// --- views ------------------------------------------------------------------------------------

namespace {

Tensor alias_with(const Tensor& base, int64_t offset, Shape shape, Shape strides) {
  return Tensor::make_view(base.storage(), offset, std::move(shape), std::move(strides), base.dtype());
}

/// Strides for viewing `t` as `new_shape` without a copy, or empty when impossible
/// (the algorithm of PyTorch's computeStride: match chunks of contiguous dims).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  Shape new_strides(new_shape.size());
  if (shape_numel(old_shape) <= 1) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; tensor_d--) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 ||
        (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Shape infer_shape(const Shape& requested, int64_t numel, const Tensor& t) {
  Shape s = requested;
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      Y9_CHECK_SHAPE(infer < 0, "reshape: more than one -1 in ", shape_str(requested));
      infer = static_cast<int64_t>(i);
    } else {
      Y9_CHECK_SHAPE(s[i] >= 0, "reshape: negative size in ", shape_str(requested));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    Y9_CHECK_SHAPE(known != 0 && numel % known == 0, "reshape: cannot reshape ", t.str(), " to ",
                   shape_str(requested));
    s[infer] = numel / known;
  }
  Y9_CHECK_SHAPE(shape_numel(s) == numel, "reshape: cannot reshape ", t.str(), " (", numel,
                 " elements) to ", shape_str(requested));
  return s;
}

}  // namespace

Tensor Tensor::view(const Shape& shape_in) const {
  Shape s = infer_shape(shape_in, numel(), *this);
  auto st = view_strides(shape(), strides(), s);
  Y9_CHECK_SHAPE(st.has_value(), "view: ", str(), " cannot be viewed as ", shape_str(s),
                 " without a copy (non-contiguous); use reshape()");
  Tensor out = alias_with(*this, offset(), s, *st);
  Shape in_shape = shape();
  autograd::record_fn("ViewBackward", {*this}, {out}, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(in_shape)};
  });
  return out;
}

Tensor Tensor::reshape(const Shape& shape_in) const {
  Shape s = infer_shape(shape_in, numel(), *this);
  if (view_strides(shape(), strides(), s).has_value()) return view(s);
  return contiguous().view(s);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t a = wrap_dim(start_dim), b = wrap_dim(end_dim);
  Y9_CHECK_SHAPE(a <= b, "flatten: start_dim ", start_dim, " after end_dim ", end_dim, " for ", str());
  Shape s;
  for (int64_t i = 0; i < a; ++i) s.push_back(size(i));
  int64_t m = 1;
  for (int64_t i = a; i <= b; ++i) m *= size(i);
  s.push_back(m);
  for (int64_t i = b + 1; i < dim(); ++i) s.push_back(size(i));
  return reshape(s);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  Y9_CHECK_SHAPE(static_cast<int64_t>(dims.size()) == dim(), "permute: ", dims.size(), " dims given for ", str());
  Shape s(dims.size()), st(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i]);
    Y9_CHECK_SHAPE(inverse[d] < 0, "permute: dimension ", d, " repeated for ", str());
    inverse[d] = static_cast<int64_t>(i);
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  Tensor out = alias_with(*this, offset(), s, st);
  autograd::record_fn("PermuteBackward", {*this}, {out}, [inverse](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].permute(inverse)};
  });
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> p(static_cast<size_t>(dim()));
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[wrap_dim(d0)], p[wrap_dim(d1)]);
  return permute(p);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d);
  Y9_CHECK_SHAPE(step > 0, "slice: step must be positive, got ", step);
  int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] = strides()[d] * step;
  Tensor out = alias_with(*this, offset() + start * strides()[d], s, st);
  Shape in_shape = shape();
  DType dt = dtype();
  Device dev = device();
  autograd::record_fn("SliceBackward", {*this}, {out}, [=](const std::vector<Tensor>& g) {
    Tensor gi = Tensor::zeros(in_shape, dt, dev);
    gi.slice(d, start, end, step).copy_(g[0]);
    return std::vector<Tensor>{gi};
  });
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d);
  Y9_CHECK_SHAPE(start >= 0 && length >= 0 && start + length <= shape()[d], "narrow: [", start, ", ",
                 start + length, ") out of range for dim ", d, " of ", str());
  return slice(d, start, start + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d);
  int64_t n = shape()[d];
  if (index < 0) index += n;
  Y9_CHECK_SHAPE(index >= 0 && index < n, "select: index ", index, " out of range for dim ", d, " of ", str());
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, true);
  Shape s = shape(), st = strides();
  int64_t new_stride = d < dim() ? st[d] * s[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  Tensor out = alias_with(*this, offset(), s, st);
  autograd::record_fn("UnsqueezeBackward", {*this}, {out}, [d](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].squeeze(d)};
  });
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d);
  if (shape()[d] != 1) return *this;
  Shape s = shape(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = alias_with(*this, offset(), s, st);
  autograd::record_fn("SqueezeBackward", {*this}, {out}, [d](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].unsqueeze(d)};
  });
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  {
    autograd::NoGradGuard ng;
    out.copy_(*this);
  }
  autograd::record_fn("CloneBackward", {*this}, {out},
                      [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = Tensor::empty(shape(), dt, device());
  {
    autograd::NoGradGuard ng;
    out.copy_(*this);
  }
  DType src = dtype();
  if (is_floating(dt) && is_floating(src)) {
    autograd::record_fn("ToDTypeBackward", {*this}, {out}, [src](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(src)};
    });
  }
  return out;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor out = Tensor::empty(shape(), dtype(), dev);
  {
    autograd::NoGradGuard ng;
    out.copy_(*this);
  }
  Device src = device();
  autograd::record_fn("ToDeviceBackward", {*this}, {out}, [src](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].to(src)};
  });
  return out;
}

}  // namespace engine
