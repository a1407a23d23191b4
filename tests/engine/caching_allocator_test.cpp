// CachingAllocatorCore policy on the CPU with a fake raw backend: size classes, reuse from the
// free lists, statistics, empty_cache, out-of-memory retry and its message, no raw allocation
// after warm-up, and stream awareness with fake streams/events (per-stream reuse, record_stream).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/caching_allocator.h"
#include "engine/error.h"

namespace {

using engine::CachingAllocatorCore;

// Fake backend: 256-byte aligned host memory, counts calls, can refuse above a byte budget.
struct FakeBackend {
  int64_t allocs = 0, frees = 0, held_bytes = 0;
  int64_t budget = INT64_MAX;
  std::vector<std::pair<void*, size_t>> live;
  // Fake events: handle = 1-based id; complete when the test says so (complete_stream/all).
  struct FakeEvent {
    void* stream;
    bool done = false;
    bool destroyed = false;
  };
  std::vector<FakeEvent> events;
  int64_t syncs = 0;
  void complete_stream(void* stream) {
    for (auto& e : events)
      if (e.stream == stream) e.done = true;
  }
  int64_t live_events() const {
    int64_t n = 0;
    for (const auto& e : events) n += e.destroyed ? 0 : 1;
    return n;
  }
  FakeEvent& ev(void* h) { return events.at(reinterpret_cast<uintptr_t>(h) - 1); }
  CachingAllocatorCore::EventOps ops() {
    CachingAllocatorCore::EventOps o;
    o.record = [this](void* stream) -> void* {
      events.push_back(FakeEvent{stream});
      return reinterpret_cast<void*>(static_cast<uintptr_t>(events.size()));
    };
    o.query = [this](void* h) {
      EXPECT_FALSE(ev(h).destroyed);
      return ev(h).done;
    };
    o.synchronize = [this](void* h) {
      syncs++;
      ev(h).done = true;
    };
    o.destroy = [this](void* h) {
      EXPECT_FALSE(ev(h).destroyed);
      ev(h).destroyed = true;
    };
    o.describe_memory = [] { return std::string("; the device has 1.00 MiB free of 80.00 MiB"); };
    return o;
  }
  CachingAllocatorCore make() {
    return CachingAllocatorCore(
        [this](size_t n) -> void* {
          if (held_bytes + static_cast<int64_t>(n) > budget) return nullptr;
          void* p = std::aligned_alloc(256, n);
          allocs++;
          held_bytes += static_cast<int64_t>(n);
          live.emplace_back(p, n);
          return p;
        },
        [this](void* p) {
          for (auto it = live.begin(); it != live.end(); ++it)
            if (it->first == p) {
              held_bytes -= static_cast<int64_t>(it->second);
              live.erase(it);
              break;
            }
          frees++;
          std::free(p);
        },
        "fake:0", with_events ? ops() : CachingAllocatorCore::EventOps{});
  }
  bool with_events = true;
};

void* const kCompute = reinterpret_cast<void*>(0x10);
void* const kComm = reinterpret_cast<void*>(0x20);
void* const kH2D = reinterpret_cast<void*>(0x30);

TEST(CachingAllocator, RoundSize) {
  EXPECT_EQ(CachingAllocatorCore::round_size(1), 512u);
  EXPECT_EQ(CachingAllocatorCore::round_size(512), 512u);
  EXPECT_EQ(CachingAllocatorCore::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocatorCore::round_size(1 << 20), size_t(1) << 20);
  EXPECT_EQ(CachingAllocatorCore::round_size((1 << 20) + 1), size_t(2) << 20);
  EXPECT_EQ(CachingAllocatorCore::round_size((5 << 20) + 7), size_t(6) << 20);
  for (size_t n : {size_t(3), size_t(700), size_t(99999), size_t(3) << 20, (size_t(7) << 20) + 1}) {
    size_t r = CachingAllocatorCore::round_size(n);
    EXPECT_GE(r, n);
    EXPECT_EQ(r % 512, 0u);
  }
}

TEST(CachingAllocator, ReuseStatsAndAlignment) {
  FakeBackend fb;
  auto a = fb.make();
  EXPECT_EQ(a.allocate(0), nullptr);
  void* p = a.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  auto s = a.stats();
  EXPECT_EQ(s.live_bytes, 1000);
  EXPECT_EQ(s.num_misses, 1);
  EXPECT_EQ(s.cached_bytes, 0);
  a.deallocate(p, 1000);
  s = a.stats();
  EXPECT_EQ(s.live_bytes, 0);
  EXPECT_EQ(s.cached_bytes, 1024);
  EXPECT_EQ(s.peak_bytes, 1000);
  // Same size class (1024) reuses the block; a different class misses.
  void* q = a.allocate(1020);
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.stats().num_misses, 1);
  EXPECT_EQ(a.stats().cached_bytes, 0);
  void* r = a.allocate(100);
  EXPECT_NE(r, p);
  EXPECT_EQ(a.stats().num_misses, 2);
  EXPECT_EQ(a.stats().num_allocs, 3);
  a.deallocate(q, 1020);
  a.deallocate(r, 100);
  EXPECT_EQ(a.stats().cached_bytes, 1024 + 512);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, 0);
  EXPECT_EQ(fb.frees, 0);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0);
  EXPECT_EQ(fb.frees, 2);
  EXPECT_EQ(fb.held_bytes, 0);
}

TEST(CachingAllocator, LargeBestFitBoundedWaste) {
  FakeBackend fb;
  auto a = fb.make();
  void* big = a.allocate(size_t(6) << 20);  // class 6 MiB
  a.deallocate(big, size_t(6) << 20);
  void* p = a.allocate(size_t(4) << 20);  // 4 MiB: 6 < 2*4, reuse
  EXPECT_EQ(p, big);
  a.deallocate(p, size_t(4) << 20);
  void* q = a.allocate(size_t(2) << 20);  // 2 MiB: 6 >= 2*2, too wasteful -> miss
  EXPECT_NE(q, big);
  EXPECT_EQ(a.stats().num_misses, 2);
  // A small request never takes a large block.
  void* s = a.allocate(4096);
  EXPECT_NE(s, big);
  EXPECT_EQ(a.stats().num_misses, 3);
  a.deallocate(q, size_t(2) << 20);
  a.deallocate(s, 4096);
}

TEST(CachingAllocator, NoRawAllocAfterWarmup) {
  FakeBackend fb;
  auto a = fb.make();
  std::mt19937 rng(7);
  std::vector<size_t> sizes;
  for (int i = 0; i < 40; ++i) sizes.push_back(1 + rng() % (3u << 20));
  auto step = [&] {
    std::vector<void*> ps;
    for (size_t n : sizes) ps.push_back(a.allocate(n));
    std::set<void*> uniq(ps.begin(), ps.end());
    EXPECT_EQ(uniq.size(), ps.size());  // no block handed out twice
    for (size_t i = 0; i < ps.size(); ++i) a.deallocate(ps[i], sizes[i]);
  };
  step();
  const int64_t misses = a.stats().num_misses;
  EXPECT_GT(misses, 0);
  for (int k = 0; k < 5; ++k) step();
  EXPECT_EQ(a.stats().num_misses, misses);
  EXPECT_EQ(fb.allocs, misses);
  EXPECT_EQ(a.stats().live_bytes, 0);
}

TEST(CachingAllocator, OutOfMemoryEmptiesCacheThenThrows) {
  FakeBackend fb;
  fb.budget = 4 << 20;
  auto a = fb.make();
  void* p = a.allocate(3 << 20);  // 4 MiB class: the whole budget
  a.deallocate(p, 3 << 20);
  void* q = a.allocate(1 << 20);  // miss; needs the cached 4 MiB released first
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(fb.frees, 1);
  EXPECT_EQ(a.stats().cached_bytes, 0);
  EXPECT_THROW(a.allocate(8 << 20), engine::CudaError);
  a.deallocate(q, 1 << 20);
  EXPECT_THROW(a.deallocate(reinterpret_cast<void*>(0x1000), 1), engine::InternalError);
}

TEST(CachingAllocator, ThreadSafe) {
  FakeBackend fb;
  auto a = fb.make();
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&a, t] {
      for (int i = 0; i < 500; ++i) {
        size_t n = 256 + static_cast<size_t>((i * 37 + t * 11) % 8000);
        void* p = a.allocate(n);
        static_cast<char*>(p)[0] = 1;
        a.deallocate(p, n);
      }
    });
  for (auto& t : ts) t.join();
  auto s = a.stats();
  EXPECT_EQ(s.live_bytes, 0);
  EXPECT_EQ(s.num_allocs, 2000);
  EXPECT_LE(s.num_misses, 4 * 17);  // each thread holds one block at a time; 17 size classes
}

TEST(CachingAllocatorStreams, SameStreamReuseIsImmediate) {
  FakeBackend fb;
  auto a = fb.make();
  void* p = a.allocate(4000, kComm);
  a.deallocate(p, 4000);
  EXPECT_EQ(a.allocate(4000, kComm), p);  // same stream, same class: the cached block at once
  EXPECT_EQ(a.stats().num_misses, 1);
  EXPECT_TRUE(fb.events.empty());
  a.record_stream(p, kComm);  // its own stream: nothing to wait for
  a.deallocate(p, 4000);
  EXPECT_TRUE(fb.events.empty());
  EXPECT_EQ(a.allocate(4000, kComm), p);
  a.deallocate(p, 4000);
}

TEST(CachingAllocatorStreams, BlocksBelongToTheirStream) {
  FakeBackend fb;
  auto a = fb.make();
  void* p = a.allocate(4000, kCompute);
  a.deallocate(p, 4000);
  void* q = a.allocate(4000, kComm);  // another stream never takes p's block
  EXPECT_NE(q, p);
  EXPECT_EQ(a.stats().num_misses, 2);
  void* r = a.allocate(4000, kCompute);
  EXPECT_EQ(r, p);
  void* big = a.allocate(size_t(5) << 20, kCompute);
  a.deallocate(big, size_t(5) << 20);
  void* big2 = a.allocate(size_t(5) << 20, kH2D);  // large pool too
  EXPECT_NE(big2, big);
  EXPECT_EQ(a.allocate(size_t(5) << 20, kCompute), big);
  a.deallocate(big, size_t(5) << 20);
  a.deallocate(big2, size_t(5) << 20);
  a.deallocate(q, 4000);
  a.deallocate(r, 4000);
  EXPECT_EQ(a.stats().live_bytes, 0);
}

TEST(CachingAllocatorStreams, CrossStreamReuseWaitsForEvents) {
  FakeBackend fb;
  auto a = fb.make();
  void* p = a.allocate(3000, kCompute);
  a.record_stream(p, kComm);
  a.record_stream(p, kH2D);
  a.record_stream(p, kComm);  // repeated: one event per stream
  a.deallocate(p, 3000);
  ASSERT_EQ(fb.events.size(), 2u);
  EXPECT_EQ(fb.events[0].stream, kComm);
  EXPECT_EQ(fb.events[1].stream, kH2D);
  EXPECT_EQ(a.num_pending_blocks(), 1u);
  auto s = a.stats();
  EXPECT_EQ(s.live_bytes, 0);
  EXPECT_EQ(s.cached_bytes, 3072);  // held, waiting
  // Events not complete: a request of the same class on the same stream must not get p.
  void* q = a.allocate(3000, kCompute);
  EXPECT_NE(q, p);
  fb.complete_stream(kComm);
  void* r = a.allocate(3000, kCompute);  // one of two events done: still refused
  EXPECT_NE(r, p);
  EXPECT_EQ(a.num_pending_blocks(), 1u);
  fb.complete_stream(kH2D);
  a.process_events();
  EXPECT_EQ(a.num_pending_blocks(), 0u);
  EXPECT_EQ(fb.live_events(), 0);  // destroyed once complete
  void* t = a.allocate(3000, kCompute);
  EXPECT_EQ(t, p);
  EXPECT_EQ(a.stats().num_misses, 3);
  // The uses were forgotten with the free: the next free needs no event.
  a.deallocate(t, 3000);
  EXPECT_EQ(fb.events.size(), 2u);
  EXPECT_EQ(a.allocate(3000, kCompute), p);
  a.deallocate(p, 3000);
  a.deallocate(q, 3000);
  a.deallocate(r, 3000);
  EXPECT_EQ(a.stats().live_bytes, 0);
}

TEST(CachingAllocatorStreams, EventsCheckedOnFree) {
  FakeBackend fb;
  auto a = fb.make();
  void* p = a.allocate(100, kCompute);
  a.record_stream(p, kComm);
  a.deallocate(p, 100);
  fb.complete_stream(kComm);
  void* q = a.allocate(700, kCompute);
  a.deallocate(q, 700);  // a free also processes the events
  EXPECT_EQ(a.num_pending_blocks(), 0u);
  EXPECT_EQ(a.stats().cached_bytes, 512 + 1024);
}

TEST(CachingAllocatorStreams, RecordStreamErrors) {
  FakeBackend fb;
  auto a = fb.make();
  EXPECT_THROW(a.record_stream(reinterpret_cast<void*>(0x1000), kComm), engine::InternalError);
  void* p = a.allocate(100, kCompute);
  EXPECT_THROW(a.record_stream(static_cast<char*>(p) + 256, kComm), engine::InternalError);  // not a block start
  a.deallocate(p, 100);
  EXPECT_THROW(a.record_stream(p, kComm), engine::InternalError);  // freed
  EXPECT_THROW(a.deallocate(p, 100), engine::InternalError);       // double free
  FakeBackend plain;
  plain.with_events = false;
  auto b = plain.make();
  void* q = b.allocate(100, kCompute);
  b.record_stream(q, kCompute);                                     // own stream: fine
  EXPECT_THROW(b.record_stream(q, kComm), engine::InternalError);  // no event callbacks
  b.deallocate(q, 100);
}

TEST(CachingAllocatorStreams, OutOfMemoryWaitsForEventsThenReleases) {
  FakeBackend fb;
  fb.budget = 4 << 20;
  auto a = fb.make();
  void* p = a.allocate(3 << 20, kCompute);  // the whole budget (4 MiB class)
  a.record_stream(p, kComm);
  a.deallocate(p, 3 << 20);
  EXPECT_EQ(a.num_pending_blocks(), 1u);
  void* q = a.allocate(100, kComm);  // miss; raw_alloc fails; events synchronised, cache freed
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(fb.syncs, 1);
  EXPECT_EQ(fb.frees, 1);
  EXPECT_EQ(a.num_pending_blocks(), 0u);
  EXPECT_EQ(fb.live_events(), 0);
  EXPECT_EQ(a.stats().cached_bytes, 0);
  a.deallocate(q, 100);
}

TEST(CachingAllocatorStreams, OutOfMemoryMessage) {
  FakeBackend fb;
  fb.budget = 8 << 20;
  auto a = fb.make();
  void* p = a.allocate(3 << 20, kCompute);  // 4 MiB class, live 3 MiB
  void* c = a.allocate(1 << 20, kCompute);  // 1 MiB class
  a.deallocate(c, 1 << 20);                 // cached 1 MiB (released by the retry)
  try {
    a.allocate(size_t(6) << 20, kCompute);
    FAIL() << "expected OutOfMemoryError";
  } catch (const engine::OutOfMemoryError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("fake:0 out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 6.00 MiB (6291456 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("this process holds 3.00 MiB (3.00 MiB in use, 0.00 MiB cached)"), std::string::npos) << m;
    EXPECT_NE(m.find("the device has 1.00 MiB free of 80.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("--batch"), std::string::npos) << m;
  }
  // It is a CudaError for callers that catch those.
  EXPECT_THROW(a.allocate(size_t(6) << 20, kCompute), engine::CudaError);
  a.deallocate(p, 3 << 20);
}

TEST(CachingAllocatorStreams, SteadyStateTwoStreamsNoRawAlloc) {
  FakeBackend fb;
  auto a = fb.make();
  std::mt19937 rng(11);
  std::vector<size_t> sizes;
  for (int i = 0; i < 30; ++i) sizes.push_back(1 + rng() % (3u << 20));
  // One training-like step: activations on compute, a few shared with the communication stream
  // (record_stream), uploads allocated on the host-to-device stream; all freed; at the end of
  // the step the side streams are synchronised (their events complete).
  auto step = [&] {
    std::vector<std::pair<void*, size_t>> held;
    for (size_t i = 0; i < sizes.size(); ++i) {
      void* s = i % 5 == 0 ? kH2D : kCompute;
      void* p = a.allocate(sizes[i], s);
      if (i % 3 == 0) a.record_stream(p, kComm);
      held.emplace_back(p, sizes[i]);
      if (i % 4 == 3) {  // free some early: reuse inside the step
        a.deallocate(held.front().first, held.front().second);
        held.erase(held.begin());
      }
    }
    for (auto& [p, n] : held) a.deallocate(p, n);
    fb.complete_stream(kComm);
  };
  step();
  const int64_t misses = a.stats().num_misses;
  EXPECT_GT(misses, 0);
  const int64_t raw = fb.allocs;
  for (int k = 0; k < 6; ++k) step();
  EXPECT_EQ(fb.allocs, raw);  // zero raw allocations in the steady state
  EXPECT_EQ(a.stats().num_misses, misses);
  EXPECT_EQ(fb.frees, 0);
  EXPECT_EQ(a.stats().live_bytes, 0);
  a.process_events();
  EXPECT_EQ(a.num_pending_blocks(), 0u);
  EXPECT_EQ(fb.live_events(), 0);
  a.empty_cache();
  EXPECT_EQ(fb.held_bytes, 0);
}

}  // namespace
