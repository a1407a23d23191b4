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
  /// Allocates through allocator_for(device), for work on `stream` of the device (the compute
  /// stream unless the memory is first used by a copy or communication stream). Throws
  /// OutOfMemoryError (CUDA) / Error (CPU) on out-of-memory.
  Storage(size_t nbytes, Device device, StreamKind stream = StreamKind::Compute);
  /// Wraps memory the engine does not own; `deleter` (may be empty) runs on destruction.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  /// Marks this memory as used by work queued on `stream` of its device (besides the stream it
  /// was allocated for), so the caching allocator does not reuse it after it is freed until that
  /// work is done. Call it after queueing such work (an upload on the host-to-device stream, an
  /// all-reduce on the communication stream). A no-op on the CPU and for memory the engine does
  /// not own (the wrapped constructor). Throws InternalError if the allocator does not know the block.
  void record_stream(StreamKind stream);

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
};

}  // namespace engine
