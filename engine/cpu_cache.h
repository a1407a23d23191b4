// The inference arena of the CPU allocator: a scope during which freed CPU blocks are kept and
// handed out again instead of going back to the system, so that steady-state inference (the same
// shapes pass after pass) allocates nothing from the system (issue 15: "a tensor arena for
// inference, with no allocation in steady state"). CPU training holds one too (apps/training/
// trainer.cpp, cap Y9_CPU_TRAIN_CACHE_MB, default 1 GiB): its steps allocate the same blocks each
// time. Outside every scope the CPU allocator behaves exactly as before (aligned_alloc / free per
// block).
#pragma once
#include <cstddef>

namespace engine {

/// While at least one CpuCacheScope is alive (any thread), engine::cpu_allocator():
///   - allocates every block at its size class (64-byte multiples up to 4 KiB; above that the
///     size rounded up to an eighth of its power of two, so at most 12.5% more than asked);
///   - on deallocate of a block it allocated in a scope, keeps it in a free list of its class
///     (instead of free()) unless the cached bytes would exceed the scope's limit;
///   - on allocate, hands out a cached block of the request's class when there is one; only a
///     miss reaches the system (AllocatorStats::num_misses).
/// Blocks allocated before any scope are freed to the system as before. When the last scope ends,
/// every cached block is released (AllocatorStats::cached_bytes returns to 0); blocks still in use
/// then go back to the system when they are freed. Thread-safe (the allocator's mutex).
/// Memory: at most the largest `max_cached_bytes` of the live scopes is held unused; when a scope
/// ends, cached blocks beyond the remaining scopes' largest cap go back to the system (so a
/// validation inside CPU training leaves the training's cap in force). The cache is process-wide: blocks freed by any thread
/// while a scope lives are kept (data-loader threads, the host code of an embedding program).
/// Under AddressSanitizer nothing is cached (a reused block would hide a use after free).
/// Used by training::model_predictor (val, detect, the embedded inference build): the predictor
/// holds one scope for its lifetime; and by CPU training for its epochs.
class CpuCacheScope {
 public:
  /// Default cap on the bytes kept unused: 512 MiB. A yolov9-s batch-1 detect pass (640 x 480
  /// image, 640 px) leaves ~100 MiB cached and allocates nothing from the system once warm
  /// (bench/overhead_bench); a batch of 32 at 640 px caches what fits under the cap.
  static constexpr size_t kDefaultMaxCachedBytes = size_t(512) << 20;
  explicit CpuCacheScope(size_t max_cached_bytes = kDefaultMaxCachedBytes);
  ~CpuCacheScope();
  CpuCacheScope(const CpuCacheScope&) = delete;
  CpuCacheScope& operator=(const CpuCacheScope&) = delete;

 private:
  size_t limit_;
};

/// The size class, in bytes, the CPU allocator uses in a CpuCacheScope for a request of `nbytes`
/// bytes (> 0; 0 gives 0): a multiple of 64 at least `nbytes`. Throws engine::Error when `nbytes`
/// exceeds SIZE_MAX / 2.
size_t cpu_cache_size_class(size_t nbytes);

}  // namespace engine
