// Flat buffers (guide/style.md 3.9, after llm.c): a list of tensors is packed into ONE storage,
// each tensor starting at a 256-byte aligned offset, and every tensor handle is re-pointed at its
// slice, so existing holders (modules, optimizer groups) see the packed memory. The training
// layer's ParamStore (apps/training/param_store.h) builds the run's parameter and gradient
// buffers on these.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace engine {

/// Bytes of alignment of every segment start in a flat buffer (cuBLAS/cuDNN/vector loads).
constexpr int64_t kFlatAlignBytes = 256;

/// One tensor's place in a flat buffer.
struct FlatSegment {
  std::string name;
  int64_t offset = 0;  ///< elements from the start of the buffer (a multiple of the alignment)
  int64_t numel = 0;
  Shape shape;
};

/// A flat buffer: one storage, its segments, and a 1-D tensor over the whole buffer (padding
/// included; padding elements are zero-initialised and never written by the engine).
struct FlatBuffer {
  Tensor flat;                        ///< [total] 1-D contiguous, 256-byte aligned start
  std::vector<FlatSegment> segments;  ///< in packing order
  /// The view of segment k (contiguous, the segment's shape, no autograd).
  Tensor segment_view(size_t k) const;
};

/// Layout of `tensors` (same dtype) packed in order with `kFlatAlignBytes` alignment.
/// Returns the segments and sets *total to the element count of the buffer.
std::vector<FlatSegment> flat_layout(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t* total);

/// Packs `tensors` (all defined, same dtype and device, any layout) into one new zeroed storage
/// on that device, copies their values, and re-points every tensor handle (its TensorImpl) at its
/// contiguous slice: storage, offset and strides change; shape, dtype, requires_grad, grad and
/// autograd identity do not. Call before any forward pass records them (views made earlier keep
/// the old storage). Errors: engine::Error on an empty list, an undefined tensor, or mixed
/// dtype/device; a non-leaf tensor (grad_fn set) is rejected too.
FlatBuffer pack_flat(const std::vector<std::pair<std::string, Tensor>>& tensors);

/// A new zeroed flat buffer with `like`'s layout, dtype and device (segments copied; the flat
/// tensor starts 256-byte aligned). Used for gradient and optimizer-state buffers.
FlatBuffer flat_zeros_like(const FlatBuffer& like);

}  // namespace engine
