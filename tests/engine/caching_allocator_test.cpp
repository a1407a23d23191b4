// CachingAllocatorCore policy on the CPU with a fake raw backend: size classes, reuse from the
// free lists, statistics, empty_cache, out-of-memory retry and no raw allocation after warm-up.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <set>
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
        "fake:0");
  }
};

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

}  // namespace
