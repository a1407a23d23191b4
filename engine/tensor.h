// Tensor: a strided N-d view into a Storage, with dtype, device and autograd metadata.
// Layout is row-major; images are NCHW. Views (reshape, permute, slice, ...) share storage and
// record autograd nodes, so gradients flow through them. Methods that run a kernel (contiguous,
// copy_, to, fill_, add_) call the backend of the tensor's device (engine/tensor_methods.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/storage.h"

namespace engine {

using Shape = std::vector<int64_t>;

/// "[2, 3, 4]".
std::string shape_str(const Shape& s);
/// Product of the sizes (1 for a 0-d shape).
int64_t shape_numel(const Shape& s);
/// Row-major strides of a contiguous tensor of this shape, in elements.
Shape contiguous_strides(const Shape& s);

namespace autograd {
class Node;
}

class TensorImpl;

/// Handle to a tensor (cheap to copy: shares the impl). A default-constructed Tensor is
/// "undefined" (used for absent gradients). Every accessor on an undefined tensor throws.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- metadata ------------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  /// Size of one dimension; negative `dim` counts from the end. Throws ShapeError if out of range.
  int64_t size(int64_t dim) const;
  const Shape& strides() const;
  int64_t stride(int64_t dim) const;
  /// Offset of element [0,...,0] from the start of the storage, in elements.
  int64_t offset() const;
  int64_t dim() const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  /// Pointer to element [0,...,0] (storage base + offset). Device pointer for CUDA tensors.
  void* data_ptr() const;
  /// Typed pointer; throws ShapeError when T does not match dtype().
  template <typename T>
  T* data() const {
    check_dtype(DTypeOf<T>::value, "data<T>()");
    return static_cast<T*>(data_ptr());
  }
  const std::shared_ptr<Storage>& storage() const;
  /// "Tensor[2, 3] f32 cpu".
  std::string str() const;
  /// Normalises a possibly negative dim against dim() (or dim()+1 when `for_insert`).
  int64_t wrap_dim(int64_t d, bool for_insert = false) const;

  // --- factories -----------------------------------------------------------------------------
  /// Uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     Device device = Device::cpu());
  /// Copies host values into a new tensor of `shape` on `device`; throws if sizes differ.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::cpu());
  /// 0, 1, ..., n-1.
  static Tensor arange(int64_t n, DType dtype = DType::F32, Device device = Device::cpu());
  /// Wraps external memory without copying; `deleter` runs when the last view goes away.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                          std::function<void(void*)> deleter = {});
  /// A tensor sharing `storage` with the given geometry (no checks beyond bounds).
  static Tensor make_view(std::shared_ptr<Storage> storage, int64_t offset, Shape shape,
                          Shape strides, DType dtype);

  // --- views (share storage; autograd-aware) -------------------------------------------------
  /// Same data, new shape; one dim may be -1. Copies when the strides do not allow a view.
  Tensor reshape(const Shape& shape) const;
  /// Like reshape but never copies; throws ShapeError when no view is possible.
  Tensor view(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  /// Elements start, start+step, ... < end along `dim` (negative start/end count from the end,
  /// clamped like Python slicing).
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  /// Index `index` along `dim`, removing that dim.
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  /// Broadcast view (stride 0 on expanded dims) to `shape`; -1 keeps a size. Backward sums.
  Tensor expand(const Shape& shape) const;
  /// This tensor if contiguous, else a contiguous copy.
  Tensor contiguous() const;
  /// A contiguous copy (differentiable).
  Tensor clone() const;
  /// Converts dtype (differentiable for float dtypes); returns *this when already `dtype`.
  Tensor to(DType dtype) const;
  /// Copies to another device (differentiable); returns *this when already there.
  Tensor to(Device device) const;
  /// Same data, no autograd history, requires_grad false.
  Tensor detach() const;

  // --- in-place (not recorded by autograd; throw on a leaf that requires grad in grad mode) ---
  /// Copies `src` (broadcast to this shape, converted to this dtype, any device) into this view.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  /// this += alpha * other (other broadcast to this shape).
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  /// this *= value.
  Tensor& mul_(double value);

  // --- host access (copies to host: never use inside forward/backward/loss) --------------------
  /// The single element as T; throws ShapeError when numel() != 1.
  template <typename T>
  T item() const;
  /// All elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // --- autograd ------------------------------------------------------------------------------
  bool requires_grad() const;
  /// Marks a leaf as needing gradients; throws on a non-leaf.
  Tensor& set_requires_grad(bool value = true);
  /// Accumulated gradient of a leaf (undefined until a backward reaches it).
  const Tensor& grad() const;
  /// Sets the gradient (e.g. to a view into a flat gradient buffer); backward accumulates into it.
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  bool is_leaf() const;
  /// Runs backward from this tensor. `grad` defaults to ones for a one-element tensor.
  /// Saved tensors are released as each node finishes unless `retain_graph`.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  /// Hook called on a leaf after a backward pass has accumulated into its grad (DDP buckets).
  void register_grad_ready_hook(std::function<void(const Tensor&)> hook) const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// True when both handles refer to the same impl.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  void check_dtype(DType expected, const char* what) const;

 private:
  const TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

/// State behind a Tensor handle.
class TensorImpl {
 public:
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  ///< elements
  Shape shape;
  Shape strides;       ///< elements
  DType dtype = DType::F32;

  bool requires_grad = false;  ///< leaves only; non-leaves require grad iff grad_fn is set
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  /// Lazily created AccumulateGrad node of a leaf (weakly references this impl).
  std::shared_ptr<autograd::Node> grad_accumulator;
  std::vector<std::function<void(const Tensor&)>> grad_ready_hooks;
};

/// Marks the storage of `t` as used by work queued on `stream` of its device, besides the
/// stream it was allocated for (Storage::record_stream; PyTorch's Tensor.record_stream): when
/// the last view goes away, the caching allocator reuses the memory only after that work is
/// done. Call it after queueing the work. A no-op on the CPU and for wrapped external memory.
/// Throws Error for an undefined tensor, InternalError if the allocator does not know the block.
void record_stream(const Tensor& t, StreamKind stream);

/// Copies `src` (a contiguous CPU tensor; page-locked memory, e.g. from
/// engine::pinned_host_allocator(), makes the copy truly asynchronous) to a new tensor on `dev`:
/// the copy is queued on dev's StreamKind::HostToDevice stream after the work already queued on its
/// compute stream (which may still use the memory the new tensor reuses), and later compute work
/// waits for it through an event, without blocking the host; the result is marked with
/// record_stream(HostToDevice). `done` receives an event recorded after the copy: the caller must
/// keep `src` alive and unchanged until `done` is complete (DeviceContext::synchronize(done)).
/// For a CPU `dev` this is src.to(dev) and `done` stays empty (complete).
/// Shapes and dtypes: any; the result is contiguous with src's shape and dtype.
/// Throws Error for an undefined, non-CPU or (CUDA `dev`) non-contiguous `src`, CudaError from the
/// runtime.
Tensor upload_async(const Tensor& src, Device dev, Event& done);

// --- template definitions ----------------------------------------------------------------------
namespace detail {
/// Host-side copy of `nbytes` from host memory into `dst` tensor's storage (any device).
void copy_host_to_tensor(const void* src, const Tensor& dst);
/// Row-major host copy of `t` converted to `dtype` into `dst` (numel elements).
void copy_tensor_to_host(const Tensor& t, DType dtype, void* dst);
}  // namespace detail

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  Y9_CHECK_SHAPE(static_cast<int64_t>(values.size()) == shape_numel(shape),
                 "Tensor::from_vector: ", values.size(), " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DTypeOf<T>::value, device);
  detail::copy_host_to_tensor(values.data(), t);
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out(static_cast<size_t>(numel()));
  detail::copy_tensor_to_host(*this, DTypeOf<T>::value, out.data());
  return out;
}

template <typename T>
T Tensor::item() const {
  Y9_CHECK_SHAPE(numel() == 1, "Tensor::item: tensor of shape ", shape_str(shape()),
                 " has ", numel(), " elements, expected 1");
  return to_vector<T>()[0];
}

}  // namespace engine
