// Our all-reduce algorithms (ring, recursive halving-doubling) and the library's baseline under
// mpirun with 2, 3 and 4 ranks: exact sums for every payload type, for counts that do and do not
// divide by the world size, counts below the world size and zero; averages; tiny slices (deep
// pipelining); bitwise-equal results on every rank; two communicators used from two threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "apps/training/dist/allreduce.h"
#include "tests/dist_util.h"
#include "tests/training/payload_util.h"

namespace {

using engine::DType;
using training::dist::AllReduceAlgo;
using training::dist::Communicator;
using training::dist::ReduceOp;

using payload_test::decode;
using payload_test::encode;
using payload_test::value;

// Every rank holds the same bytes.
void expect_identical_on_all_ranks(Communicator& c, const std::vector<uint8_t>& buf) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : buf) h = (h ^ b) * 1099511628211ull;
  std::vector<uint64_t> all(static_cast<size_t>(c.world_size()));
  c.all_gather(&h, sizeof h, all.data());
  for (size_t r = 0; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " differs from rank 0";
}

void check(AllReduceAlgo algo, DType dt, int64_t count, ReduceOp op, size_t slice_bytes, int in_flight = 2) {
  Communicator& c = dist_test::world();
  const int W = c.world_size();
  std::vector<double> mine(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) mine[i] = value(c.rank(), i);
  std::vector<uint8_t> buf = encode(mine, dt);
  training::dist::AllReduceOptions opts;
  opts.slice_bytes = slice_bytes;
  opts.slices_in_flight = in_flight;
  training::dist::all_reduce(c, buf.data(), count, dt, op, algo, opts);
  SCOPED_TRACE(::testing::Message() << "algo " << training::dist::allreduce_algo_name(algo) << " dtype "
                                    << engine::dtype_name(dt) << " count " << count << " slice " << slice_bytes
                                    << " in flight " << in_flight << " op " << (op == ReduceOp::Sum ? "sum" : "avg")
                                    << " rank " << c.rank());
  int bad = 0;
  for (int64_t i = 0; i < count && bad < 5; ++i) {
    double sum = 0;
    for (int r = 0; r < W; ++r) sum += value(r, i);
    const double got = decode(buf, dt, static_cast<size_t>(i));
    if (op == ReduceOp::Sum) {
      if (got != sum) {
        ADD_FAILURE() << "element " << i << ": " << got << " != exact sum " << sum;
        ++bad;
      }
    } else {
      const double tol = dt == DType::BF16 ? 1e-2 : dt == DType::F16 ? 1e-3 : 1e-6;
      if (std::abs(got - sum / W) > tol * (1 + std::abs(sum / W))) {
        ADD_FAILURE() << "element " << i << ": " << got << " != average " << sum / W;
        ++bad;
      }
    }
  }
  expect_identical_on_all_ranks(c, buf);
}

std::vector<int64_t> counts() {
  const int64_t W = dist_test::world().world_size();
  return {0, 1, W - 1, W, W + 1, 2 * W + 1, 1000, 1003, 65536 + 7};
}

class AllReduce : public ::testing::TestWithParam<AllReduceAlgo> {};

TEST_P(AllReduce, ExactSumEveryDtypeAndCount) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (int64_t n : counts()) check(GetParam(), dt, n, ReduceOp::Sum, 256 << 10);
}

TEST_P(AllReduce, TinySlicesPipelineDeep) {
  // 3-element slices: many slices per chunk, odd remainders, 1, 2, 3 and 4 slices in flight (each
  // reusing its scratch slot only after the slice in it was reduced).
  for (int in_flight : {1, 2, 3, 4})
    for (DType dt : {DType::F32, DType::BF16})
      for (int64_t n : {int64_t(1), int64_t(97), int64_t(1001)})
        check(GetParam(), dt, n, ReduceOp::Sum, 3 * engine::dtype_size(dt), in_flight);
}

TEST(AllReduceOptions, SlicesInFlightOutOfRange) {
  Communicator& c = dist_test::world();
  std::vector<float> v(100, 1.0f);
  training::dist::AllReduceOptions o;
  for (int bad : {0, training::dist::kMaxSlicesInFlight + 1}) {
    o.slices_in_flight = bad;
    // Every rank rejects the same options before any exchange, so none is left waiting.
    EXPECT_THROW(training::dist::ring_all_reduce(c, v.data(), 100, DType::F32, ReduceOp::Sum, o), engine::Error);
    EXPECT_THROW(training::dist::halving_doubling_all_reduce(c, v.data(), 100, DType::F32, ReduceOp::Sum, o),
                 engine::Error);
  }
}

TEST_P(AllReduce, Average) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int64_t n : {int64_t(5), int64_t(4099)}) check(GetParam(), dt, n, ReduceOp::Avg, 1 << 10);
}

TEST_P(AllReduce, LargeBuffer) { check(GetParam(), DType::F32, (int64_t(1) << 22) + 5, ReduceOp::Sum, 256 << 10); }

INSTANTIATE_TEST_SUITE_P(Algorithms, AllReduce,
                         ::testing::Values(AllReduceAlgo::Ring, AllReduceAlgo::HalvingDoubling,
                                           AllReduceAlgo::Library, AllReduceAlgo::Auto),
                         [](const auto& info) { return std::string(training::dist::allreduce_algo_name(info.param)); });

TEST(Communicator, TwoThreadsOnDuplicates) {
  // The gradient reducer's thread and the main thread run collectives at the same time on
  // separate communicators; neither's traffic may leak into the other's.
  Communicator& c = dist_test::world();
  auto dup = c.duplicate();
  const int W = c.world_size();
  std::vector<float> a(5000), b(777);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(c.rank() + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(10 * (c.rank() + 1));
  std::thread t([&] {
    for (int k = 0; k < 20; ++k) training::dist::ring_all_reduce(*dup, a.data(), static_cast<int64_t>(a.size()), DType::F32, ReduceOp::Avg, 512);
  });
  for (int k = 0; k < 20; ++k) training::dist::halving_doubling_all_reduce(c, b.data(), static_cast<int64_t>(b.size()), DType::F32, ReduceOp::Avg, 256);
  t.join();
  const float ea = static_cast<float>(W + 1) / 2.0f, eb = 10.0f * static_cast<float>(W + 1) / 2.0f;
  for (float v : a) ASSERT_NEAR(v, ea, 1e-4);
  for (float v : b) ASSERT_NEAR(v, eb, 1e-3);
}

TEST(Communicator, BroadcastBarrierAllGather) {
  Communicator& c = dist_test::world();
  std::vector<int32_t> v(1000, c.rank() == c.world_size() - 1 ? 42 : -1);
  c.broadcast(v.data(), v.size() * sizeof(int32_t), c.world_size() - 1);
  for (int32_t x : v) ASSERT_EQ(x, 42);
  c.barrier();
  int32_t mine = c.rank() * 3;
  std::vector<int32_t> all(static_cast<size_t>(c.world_size()));
  c.all_gather(&mine, sizeof mine, all.data());
  for (int r = 0; r < c.world_size(); ++r) EXPECT_EQ(all[static_cast<size_t>(r)], r * 3);
}

TEST(AllReduceAlgoNames, ParseAndRejectUnknown) {
  EXPECT_EQ(training::dist::parse_allreduce_algo("ring"), AllReduceAlgo::Auto);
  EXPECT_EQ(training::dist::parse_allreduce_algo("nccl"), AllReduceAlgo::Library);
  EXPECT_EQ(training::dist::parse_allreduce_algo("hd"), AllReduceAlgo::HalvingDoubling);
  EXPECT_THROW(training::dist::parse_allreduce_algo("tree"), engine::ConfigError);
}

}  // namespace
