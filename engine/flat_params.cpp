// Flat parameter/gradient buffers: packing tensors into one 256-byte aligned storage.
#include "engine/flat_params.h"

#include <cstdint>

#include "engine/autograd.h"

namespace engine {

namespace {

int64_t align_elems(DType dtype) {
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  return kFlatAlignBytes % es == 0 ? kFlatAlignBytes / es : 1;
}

void check_list(const std::vector<std::pair<std::string, Tensor>>& tensors, const char* what) {
  Y9_CHECK(!tensors.empty(), what, ": empty tensor list");
  const Tensor& first = tensors.front().second;
  Y9_CHECK(first.defined(), what, ": tensor '", tensors.front().first, "' is undefined");
  for (const auto& [name, t] : tensors) {
    Y9_CHECK(t.defined(), what, ": tensor '", name, "' is undefined");
    Y9_CHECK(t.dtype() == first.dtype() && t.device() == first.device(), what, ": tensor '", name, "' (",
             t.str(), ") differs in dtype/device from '", tensors.front().first, "' (", first.str(), ")");
    Y9_CHECK(t.is_leaf(), what, ": tensor '", name, "' is not a leaf (it has a grad_fn)");
  }
}

// A zeroed buffer of `total` elements whose first element is 256-byte aligned: the storage is
// over-allocated by one alignment unit and the tensor starts at the first aligned element.
Tensor aligned_zeros(int64_t total, DType dtype, Device device) {
  const int64_t al = align_elems(dtype);
  const size_t es = dtype_size(dtype);
  auto storage = std::make_shared<Storage>(static_cast<size_t>(total + al) * es, device);
  const auto base = reinterpret_cast<uintptr_t>(storage->data());
  int64_t pad = 0;
  if (base % kFlatAlignBytes != 0 && al > 1) {
    const uintptr_t misalign = base % kFlatAlignBytes;
    Y9_ASSERT(misalign % es == 0, "flat buffer: storage not element aligned");
    pad = static_cast<int64_t>((kFlatAlignBytes - misalign) / es);
  }
  Tensor whole = Tensor::make_view(storage, 0, {total + al}, {1}, dtype);
  whole.zero_();
  return Tensor::make_view(storage, pad, {total}, {1}, dtype);
}

}  // namespace

Tensor FlatBuffer::segment_view(size_t k) const {
  const FlatSegment& s = segments.at(k);
  return Tensor::make_view(flat.storage(), flat.offset() + s.offset, s.shape, contiguous_strides(s.shape),
                           flat.dtype());
}

std::vector<FlatSegment> flat_layout(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t* total) {
  std::vector<FlatSegment> segs;
  segs.reserve(tensors.size());
  int64_t off = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t al = align_elems(t.dtype());
    off = (off + al - 1) / al * al;
    segs.push_back({name, off, t.numel(), t.shape()});
    off += t.numel();
  }
  if (!tensors.empty()) {
    const int64_t al = align_elems(tensors.front().second.dtype());
    off = (off + al - 1) / al * al;
  }
  if (total) *total = off;
  return segs;
}

FlatBuffer pack_flat(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  check_list(tensors, "pack_flat");
  autograd::NoGradGuard no_grad;
  const Tensor& first = tensors.front().second;
  FlatBuffer fb;
  int64_t total = 0;
  fb.segments = flat_layout(tensors, &total);
  fb.flat = aligned_zeros(total, first.dtype(), first.device());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k].second;
    Tensor dst = fb.segment_view(k);
    dst.copy_(t.detach());
    TensorImpl* impl = t.impl();
    impl->storage = dst.storage();
    impl->offset = dst.offset();
    impl->strides = dst.strides();
  }
  return fb;
}

FlatBuffer flat_zeros_like(const FlatBuffer& like) {
  Y9_CHECK(like.flat.defined(), "flat_zeros_like: undefined flat buffer");
  FlatBuffer fb;
  fb.segments = like.segments;
  fb.flat = aligned_zeros(like.flat.numel(), like.flat.dtype(), like.flat.device());
  return fb;
}

}  // namespace engine
