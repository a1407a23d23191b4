// A reference-counted block of memory on one device; tensors are views into a storage.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "engine/allocator.h"
#include "engine/device.h"

namespace engine {

/// Owns `nbytes` bytes on `device`. Freed through its allocator (or a custom deleter for
/// wrapped external memory) when the last tensor using it goes away.
class Storage {
 public:
  /// Allocates through allocator_for(device). Throws on out-of-memory.
  Storage(size_t nbytes, Device device);
  /// Wraps memory the engine does not own; `deleter` (may be empty) runs on destruction.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
};

}  // namespace engine
