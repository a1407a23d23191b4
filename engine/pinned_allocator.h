// Page-locked (pinned) host memory for CPU tensors that are copied to a GPU: a caching allocator
// (CachingAllocatorCore) over cudaHostAlloc/cudaFreeHost, like PyTorch's CachingHostAllocator
// behind DataLoader(pin_memory=True). Without the CUDA backend, or when no CUDA device is usable
// at runtime, there is no pinned pool and callers fall back to ordinary CPU memory.
#pragma once
#include "engine/allocator.h"
#include "engine/tensor.h"

namespace engine {

/// The process-wide pinned host allocator, or nullptr when the CUDA backend is not compiled or
/// no CUDA device is usable (cuda_device_count() == 0, or a probe cudaHostAlloc fails: any CUDA
/// error counts as "no GPU"). Decided once, on the first call; thread-safe; never destroyed.
/// Its blocks are CPU memory (device() is cpu), cudaHostAllocPortable, reused through the size
/// classes of CachingAllocatorCore without stream tracking: a block may be reused as soon as its
/// tensor is freed, which is safe because host<->device copies (engine::memcpy_between_devices)
/// return only after they complete. Out of pinned memory throws engine::CudaError.
Allocator* pinned_host_allocator();

/// Uninitialised contiguous CPU tensor of `shape` and `dtype` whose memory comes from
/// `allocator` (a CPU-memory allocator such as pinned_host_allocator()) and goes back to it when
/// the last view dies. `allocator` == nullptr gives Tensor::empty(shape, dtype) (plain CPU).
/// Throws what the allocator throws; ShapeError on a negative size.
Tensor empty_from_allocator(Allocator* allocator, const Shape& shape, DType dtype);

}  // namespace engine
