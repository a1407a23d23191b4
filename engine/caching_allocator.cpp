// CachingAllocatorCore: size classes, per-stream free lists, cross-stream events and statistics
// (see caching_allocator.h).
#include "engine/caching_allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "engine/error.h"

namespace engine {

namespace {
std::string mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}
}  // namespace

CachingAllocatorCore::CachingAllocatorCore(std::function<void*(size_t)> raw_alloc, std::function<void(void*)> raw_free,
                                           std::string what, EventOps events)
    : raw_alloc_(std::move(raw_alloc)),
      raw_free_(std::move(raw_free)),
      what_(std::move(what)),
      events_(std::move(events)) {}

CachingAllocatorCore::~CachingAllocatorCore() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    synchronize_and_free_events_locked();
  } catch (...) {  // a failing device at exit: the blocks still waiting are leaked
  }
  release_cached_locked();
}

size_t CachingAllocatorCore::round_size(size_t nbytes) {
  if (nbytes <= kMinBlockSize) return kMinBlockSize;
  size_t small = (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
  if (small <= kSmallSize) return small;
  return (nbytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void CachingAllocatorCore::insert_free_locked(Block* b) {
  (b->size <= kSmallSize ? free_small_ : free_large_)
      .emplace(reinterpret_cast<uintptr_t>(b->stream), b->size, reinterpret_cast<uintptr_t>(b->ptr));
}

void* CachingAllocatorCore::allocate(size_t nbytes, Stream stream) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  process_events_locked();
  void* p = nullptr;
  const bool small = size <= kSmallSize;
  auto& pool = small ? free_small_ : free_large_;
  const uintptr_t sid = reinterpret_cast<uintptr_t>(stream);
  auto it = pool.lower_bound(Key{sid, size, 0});
  // Same stream only. Small: exact size class. Large: best fit below 2x (blocks are not split).
  if (it != pool.end() && std::get<0>(*it) == sid &&
      (small ? std::get<1>(*it) == size : std::get<1>(*it) < 2 * size)) {
    p = reinterpret_cast<void*>(std::get<2>(*it));
    pool.erase(it);
    Block& b = blocks_.at(p);
    b.in_use = true;
    stats_.cached_bytes -= static_cast<int64_t>(b.size);
  } else {
    p = raw_alloc_(size);
    if (!p) {  // out of memory: wait for the blocks held by events, give the cache back, retry
      synchronize_and_free_events_locked();
      release_cached_locked();
      p = raw_alloc_(size);
    }
    if (!p) throw_oom_locked(nbytes, size);
    if (reinterpret_cast<uintptr_t>(p) % kAlignment != 0) {
      raw_free_(p);
      Y9_THROW(InternalError, what_, " raw allocation not 256-byte aligned");
    }
    stats_.num_misses++;
    Block& b = blocks_[p];
    b.ptr = p;
    b.size = size;
    b.stream = stream;
    b.in_use = true;
  }
  stats_.num_allocs++;
  stats_.live_bytes += static_cast<int64_t>(nbytes);
  if (stats_.live_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.live_bytes;
  return p;
}

void CachingAllocatorCore::throw_oom_locked(size_t nbytes, size_t size) {
  const int64_t held = stats_.live_bytes + stats_.cached_bytes;
  std::string device = events_.describe_memory ? events_.describe_memory() : std::string();
  throw OutOfMemoryError(
      detail::concat(what_, " out of memory: tried to allocate ", mib(static_cast<int64_t>(nbytes)), " (", nbytes,
                     " bytes, block ", size, " bytes); this process holds ", mib(held), " (", mib(stats_.live_bytes),
                     " in use, ", mib(stats_.cached_bytes), " cached)", device,
                     ". Lower --batch (or --img) to need less memory."),
      "raw_alloc", __FILE__, __LINE__);
}

void CachingAllocatorCore::deallocate(void* p, size_t nbytes) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(p);
  Y9_ASSERT(it != blocks_.end() && it->second.in_use, what_, " caching allocator: free of an unknown pointer");
  Block& b = it->second;
  if (!b.stream_uses.empty()) {
    // insert_events: one event per other stream; the block waits for all of them.
    size_t recorded = 0;
    try {
      for (Stream s : b.stream_uses) {
        EventHandle e = events_.record(s);
        pending_.emplace_back(e, &b);
        ++recorded;
      }
    } catch (...) {  // keep the block in use; drop the events recorded so far
      for (size_t i = 0; i < recorded; ++i) {
        events_.destroy(pending_.back().first);
        pending_.pop_back();
      }
      throw;
    }
    b.pending_events = static_cast<int>(recorded);
    b.stream_uses.clear();
    b.in_use = false;
  } else {
    b.in_use = false;
    insert_free_locked(&b);
  }
  stats_.cached_bytes += static_cast<int64_t>(b.size);
  stats_.live_bytes -= static_cast<int64_t>(nbytes);
  process_events_locked();
}

void CachingAllocatorCore::record_stream(void* p, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(p);
  Y9_ASSERT(it != blocks_.end() && it->second.in_use, what_,
            " caching allocator: record_stream of a pointer that is not a block in use");
  Block& b = it->second;
  if (stream == b.stream) return;
  Y9_ASSERT(static_cast<bool>(events_.record), what_,
            " caching allocator: record_stream needs event callbacks, which this allocator lacks");
  if (std::find(b.stream_uses.begin(), b.stream_uses.end(), stream) == b.stream_uses.end())
    b.stream_uses.push_back(stream);
}

void CachingAllocatorCore::process_events_locked() {
  if (pending_.empty()) return;
  size_t keep = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    auto [e, b] = pending_[i];
    bool done = false;
    try {
      done = events_.query(e);
    } catch (...) {  // keep the unprocessed entries, then report
      for (size_t j = i; j < pending_.size(); ++j) pending_[keep++] = pending_[j];
      pending_.resize(keep);
      throw;
    }
    if (!done) {
      pending_[keep++] = pending_[i];
      continue;
    }
    events_.destroy(e);
    if (--b->pending_events == 0) insert_free_locked(b);
  }
  pending_.resize(keep);
}

void CachingAllocatorCore::synchronize_and_free_events_locked() {
  while (!pending_.empty()) {
    auto [e, b] = pending_.front();
    events_.synchronize(e);  // on error the entry stays pending
    events_.destroy(e);
    pending_.erase(pending_.begin());
    if (--b->pending_events == 0) insert_free_locked(b);
  }
}

void CachingAllocatorCore::release_cached_locked() {
  for (auto* pool : {&free_small_, &free_large_}) {
    for (const Key& k : *pool) {
      void* p = reinterpret_cast<void*>(std::get<2>(k));
      stats_.cached_bytes -= static_cast<int64_t>(std::get<1>(k));
      blocks_.erase(p);
      raw_free_(p);
    }
    pool->clear();
  }
}

void CachingAllocatorCore::process_events() {
  std::lock_guard<std::mutex> lock(mu_);
  process_events_locked();
}

void CachingAllocatorCore::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  synchronize_and_free_events_locked();
  release_cached_locked();
}

AllocatorStats CachingAllocatorCore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocatorCore::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.live_bytes;
}

size_t CachingAllocatorCore::num_pending_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [p, b] : blocks_) n += (!b.in_use && b.pending_events > 0) ? 1 : 0;
  return n;
}

}  // namespace engine
