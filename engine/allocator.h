// Memory allocators: a 64-byte aligned CPU allocator and (with CUDA) a caching device allocator.
// Both keep statistics (live and peak bytes) so tests can count memory held by saved tensors.
// The allocator pools are one of the two process-wide globals the style guide allows.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/device.h"

namespace engine {

/// Byte counters of one allocator. live = requested bytes not yet freed; peak = max of live
/// since the last reset_peak(); cached = bytes held by a caching allocator but not in use.
struct AllocatorStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t cached_bytes = 0;
  int64_t num_allocs = 0;   ///< calls to allocate()
  int64_t num_misses = 0;   ///< allocations that reached the system (malloc / cudaMalloc)
};

/// Interface of an allocator. allocate(0) returns nullptr. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Returns memory for `nbytes` bytes (64-byte aligned on CPU, 256 on CUDA).
  /// Throws engine::Error (CPU) or engine::CudaError (CUDA) when out of memory.
  virtual void* allocate(size_t nbytes) = 0;
  /// Returns memory from allocate(); `nbytes` must be the size that was asked for.
  virtual void deallocate(void* p, size_t nbytes) = 0;
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  /// Gives cached blocks back to the system (no-op on CPU).
  virtual void empty_cache() {}
};

/// The process-wide CPU allocator (64-byte aligned, counted).
Allocator* cpu_allocator();
/// The caching allocator of CUDA device `index`; throws engine::Error when CUDA is not compiled.
Allocator* cuda_allocator(int index);
/// Allocator for a device.
Allocator* allocator_for(Device d);

}  // namespace engine
