// Temporary device memory for the CUDA kernel entries (host code).
#pragma once
#include <cstddef>

#include "engine/allocator.h"
#include "engine/device.h"

namespace kernels::cuda {

/// `nbytes` bytes of device memory from the caching allocator of `dev` (none for 0), returned to it
/// at scope exit. The allocator orders its blocks on the compute stream, so freeing right after
/// queueing the kernels that use the memory on that stream is safe. Throws what the allocator
/// throws (engine::OutOfMemoryError when the device is full).
class Scratch {
 public:
  Scratch(engine::Device dev, size_t nbytes) : alloc_(engine::allocator_for(dev)), nbytes_(nbytes) {
    p_ = nbytes ? alloc_->allocate(nbytes) : nullptr;
  }
  ~Scratch() {
    if (p_) alloc_->deallocate(p_, nbytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  /// The memory as T* (nullptr when empty).
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  engine::Allocator* alloc_;
  size_t nbytes_;
  void* p_ = nullptr;
};

}  // namespace kernels::cuda
