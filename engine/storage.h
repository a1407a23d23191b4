// A reference-counted block of memory on one device; tensors are views into a storage.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "engine/allocator.h"
#include "engine/device.h"

namespace engine {

/// Data a kernel derives from the bytes of a frozen storage and keeps for the next call, for
/// example a convolution's weights re-laid-out into its primitive's blocked layout (the CPU
/// convolutions of kernels/cpu/conv.cpp). Entries are keyed by an address inside the storage (the
/// operand's first byte) and live as long as the storage. Every write that thaws the storage
/// (Storage::note_write) starts a new generation(), so a kernel records with what it derives the
/// generation it derived it at (kernels/cpu/conv.cpp's PackedWeights::Form does): data of an earlier
/// generation comes from older bytes and must be derived again (the kernel may reuse its memory:
/// the trainer freezes the parameters for each accumulation window, the optimizer step thaws
/// them). Thread-safe.
class DerivedData {
 public:
  /// The entry of `key` (of any generation; see above), or null when none was put.
  std::shared_ptr<void> find(const void* key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second;
  }
  /// Sets the entry of `key` (replacing any).
  void put(const void* key, std::shared_ptr<void> value) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_[key] = std::move(value);
  }
  /// The number of entries (tests count what a kernel kept).
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }
  /// The current generation: 0 at the first freeze, + 1 at every thaw.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  /// Starts a new generation (Storage::note_write): every entry is stale from now on.
  void next_generation() { generation_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  std::atomic<uint64_t> generation_{0};
  mutable std::mutex mu_;
  std::map<const void*, std::shared_ptr<void>> entries_;
};

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

  /// Declares the bytes constant from now on, so that kernels may keep data derived from them
  /// (derived()). graph::fuse does this for the convolution weights of an inference model, the
  /// trainer for the flat parameters between two optimizer steps. Every write through a Tensor
  /// in-place method (copy_, fill_, add_, mul_) calls note_write(), which thaws the storage; code
  /// that writes a frozen storage through a raw data pointer must call note_write() itself, before
  /// the write (training::Optimizer::step does, for its fused kernels). Not thread-safe: freeze()
  /// and note_write() must not run while a kernel on another thread reads this storage.
  void freeze();
  /// Whether the bytes are declared constant now (frozen since the last note_write()).
  bool frozen() const { return frozen_; }
  /// Thaws a frozen storage (its bytes are about to change): what was derived becomes stale (a new
  /// DerivedData generation; the entries and their memory stay, for the kernels to derive again
  /// after the next freeze). A no-op when not frozen.
  void note_write() {
    if (!frozen_) return;
    frozen_ = false;
    derived_->next_generation();
  }
  /// Where kernels keep data derived from a frozen storage; nullptr when not frozen.
  DerivedData* derived() const { return frozen_ ? derived_.get() : nullptr; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
  bool frozen_ = false;
  std::unique_ptr<DerivedData> derived_;  // made at the first freeze, kept across thaws
};

}  // namespace engine
