// ops::run_concurrently (CPU inter-op parallelism) and the concurrent oneDNN convolutions it runs:
// every task runs once, on several threads when there are several; the caller's grad mode and
// autocast state hold in the tasks; a task's exception comes back after the others finished;
// nested calls run serially; and convolutions executed on several threads at once give exactly the
// bits of the same convolutions run one after the other.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "engine/autograd.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using engine::Tensor;

using Threads = testutil::OmpThreads;
using testutil::same_bits;

TEST(RunConcurrently, RunsEveryTaskOnceOnSeveralThreads) {
  Threads t(2);
  ASSERT_EQ(ops::concurrent_threads(), 2);
  const int64_t runs0 = ops::concurrent_runs();
  std::vector<std::atomic<int>> runs(8);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < runs.size(); ++i)
    tasks.emplace_back([&, i] {
      runs[i]++;
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // long enough that both threads take tasks
    });
  ops::run_concurrently(tasks);
  for (auto& r : runs) EXPECT_EQ(r.load(), 1);
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(ops::concurrent_runs(), runs0 + 1);
}

TEST(RunConcurrently, OneThreadRunsInOrderOnTheCaller) {
  Threads t(1);
  std::vector<int> order;
  const auto caller = std::this_thread::get_id();
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 4; ++i)
    tasks.emplace_back([&, i] {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      order.push_back(i);
    });
  const int64_t runs0 = ops::concurrent_runs();
  ops::run_concurrently(tasks);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  ops::run_concurrently({});  // no tasks: nothing to do
  EXPECT_EQ(ops::concurrent_runs(), runs0);
}

TEST(RunConcurrently, TasksSeeTheCallersGradModeAndAutocast) {
  Threads t(2);
  for (bool grad : {false, true}) {
    engine::autograd::set_grad_enabled(grad);
    ops::AutocastGuard ac(DType::BF16);
    std::atomic<int> ok{0};
    std::vector<std::function<void()>> tasks(6, [&] {
      if (engine::autograd::grad_enabled() == grad && ops::autocast_enabled() &&
          ops::autocast_dtype() == DType::BF16)
        ok++;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
    ops::run_concurrently(tasks);
    EXPECT_EQ(ok.load(), 6) << "grad " << grad;
  }
  engine::autograd::set_grad_enabled(true);
  // The workers' own states are restored after the region: a later region opened without the
  // helper sees the defaults again.
  std::atomic<int> defaults{0};
#pragma omp parallel num_threads(2)
  if (engine::autograd::grad_enabled() && !ops::autocast_enabled()) defaults++;
  EXPECT_EQ(defaults.load(), 2);
}

TEST(RunConcurrently, RethrowsTheFirstErrorAfterEveryTaskRan) {
  Threads t(2);
  std::atomic<int> runs{0};
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 6; ++i)
    tasks.emplace_back([&, i] {
      runs++;
      if (i == 1) throw std::runtime_error("task 1 failed");
    });
  EXPECT_THROW(
      {
        try {
          ops::run_concurrently(tasks);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "task 1 failed");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(runs.load(), 6);
}

TEST(RunConcurrently, NestedCallsRunOnTheirTasksThread) {
  Threads t(2);
  std::atomic<int> nested_serial{0};
  std::vector<std::function<void()>> tasks(4, [&] {
    EXPECT_EQ(ops::concurrent_threads(), 1);
    EXPECT_EQ(omp_get_max_threads(), 1);  // regions a task opens get one thread, nesting on or off
    const auto me = std::this_thread::get_id();
    std::atomic<int> same{0};
    ops::run_concurrently(std::vector<std::function<void()>>(3, [&] { same += std::this_thread::get_id() == me; }));
    if (same == 3) nested_serial++;
  });
  ops::run_concurrently(tasks);
  EXPECT_EQ(nested_serial.load(), 4);
  EXPECT_EQ(omp_get_max_threads(), 2);  // the caller's count is untouched
  int after = 0;
#pragma omp parallel num_threads(2)
#pragma omp single
  after = omp_get_max_threads();  // and the workers got theirs back
  EXPECT_EQ(after, 2);
}

// Convolutions of several geometries (one repeated, so one cached primitive runs on two threads at
// once), plain and fused with SiLU, executed concurrently many times: every result has the bits of
// the same convolution run alone on one thread (the same 1-thread primitive).
TEST(RunConcurrently, ConcurrentConvolutionsMatchSerialBitForBit) {
  struct Geo {
    int64_t n, cin, h, w, cout, k, stride, pad, groups;
    bool silu;
  };
  const Geo geos[] = {{1, 16, 20, 20, 32, 3, 1, 1, 1, false}, {1, 16, 20, 20, 32, 3, 1, 1, 1, false},
                      {1, 32, 16, 12, 64, 3, 2, 1, 1, true},  {2, 24, 9, 9, 24, 3, 1, 1, 4, true},
                      {1, 64, 8, 8, 80, 1, 1, 0, 1, false},   {1, 64, 8, 8, 80, 1, 1, 0, 1, true},
                      {1, 40, 30, 30, 8, 3, 1, 1, 1, true},   // 30x30: reorders of larger maps
                      {1, 64, 184, 184, 8, 3, 1, 1, 1, true}};  // x is 8.3 MiB: its own reorder buffer per call
  constexpr int kReps = 12;
  std::vector<Tensor> xs, ws, bs, ref;
  engine::autograd::NoGradGuard ng;
  {
    Threads t(1);
    uint64_t seed = 1;
    for (const Geo& g : geos) {
      xs.push_back(testutil::random_tensor({g.n, g.cin, g.h, g.w}, seed++, -1, 1, DType::F32));
      ws.push_back(testutil::random_tensor({g.cout, g.cin / g.groups, g.k, g.k}, seed++, -0.2, 0.2, DType::F32));
      bs.push_back(testutil::random_tensor({g.cout}, seed++, -0.5, 0.5, DType::F32));
      const auto run = g.silu ? ops::conv2d_silu : ops::conv2d;
      ref.push_back(run(xs.back(), ws.back(), bs.back(), {g.stride, g.stride}, {g.pad, g.pad}, {1, 1}, g.groups));
    }
  }
  Threads t(2);
  const size_t n = std::size(geos);
  std::vector<Tensor> out(n * kReps);
  std::vector<std::function<void()>> tasks;
  for (int r = 0; r < kReps; ++r)
    for (size_t i = 0; i < n; ++i)
      tasks.emplace_back([&, i, r] {
        const Geo& g = geos[i];
        const auto run = g.silu ? ops::conv2d_silu : ops::conv2d;
        out[static_cast<size_t>(r) * n + i] =
            run(xs[i], ws[i], bs[i], {g.stride, g.stride}, {g.pad, g.pad}, {1, 1}, g.groups);
      });
  ops::run_concurrently(tasks);
  for (int r = 0; r < kReps; ++r)
    for (size_t i = 0; i < n; ++i)
      EXPECT_TRUE(same_bits(out[static_cast<size_t>(r) * n + i], ref[i])) << "geometry " << i << ", repeat " << r;
}

}  // namespace

namespace {

// What the concurrent detection head relies on (graph::Detect::inter_op runs its convs on 1-thread
// primitives where the serial head may use N-thread ones): a forward convolution's bits do not
// depend on the thread count its primitive was made for (oneDNN splits forward work over output
// blocks, each summed by one thread in the same order). Shapes of the heads at val sizes: 3x3,
// grouped 3x3 (the box chain's g=4), 1x1, plain and fused with SiLU, above the 1-thread threshold.
TEST(RunConcurrently, ForwardConvolutionBitsDoNotDependOnTheThreadCount) {
  struct Geo {
    int64_t n, cin, hw, cout, k, groups;
  };
  const Geo geos[] = {{2, 64, 40, 64, 3, 1}, {2, 64, 40, 64, 3, 4}, {2, 96, 40, 80, 1, 1}, {4, 128, 20, 128, 3, 1}};
  engine::autograd::NoGradGuard ng;
  uint64_t seed = 100;
  for (const Geo& g : geos)
    for (bool silu : {false, true}) {
      const Tensor x = testutil::random_tensor({g.n, g.cin, g.hw, g.hw}, seed++, -1, 1, DType::F32);
      const Tensor w = testutil::random_tensor({g.cout, g.cin / g.groups, g.k, g.k}, seed++, -0.1, 0.1, DType::F32);
      const Tensor b = testutil::random_tensor({g.cout}, seed++, -0.5, 0.5, DType::F32);
      const auto run = silu ? ops::conv2d_silu : ops::conv2d;
      const int64_t p = g.k / 2;
      Tensor one, two;
      {
        Threads t(1);
        one = run(x, w, b, {1, 1}, {p, p}, {1, 1}, g.groups);
      }
      {
        Threads t(2);
        two = run(x, w, b, {1, 1}, {p, p}, {1, 1}, g.groups);
      }
      EXPECT_TRUE(same_bits(one, two)) << "cin " << g.cin << " k " << g.k << " groups " << g.groups << " silu " << silu;
    }
}

}  // namespace
