// The detection head's inter-op parallelism (graph::Detect::inter_op): when it applies, and that a
// head run with its conv chains on concurrent threads returns the bits of the same head run one
// chain after the other, and a whole fused gelan-t pass the values of a 1-thread pass.
#include <gtest/gtest.h>
#include <omp.h>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "engine/autograd.h"
#include "graph/fuse.h"
#include "graph/model.h"
#include "ops/parallel.h"
#include "tests/testutil.h"

namespace {

using engine::Tensor;

/// A model YAML: a file name under configs/models, or a path.
std::string cfg(const std::string& file) {
  return file.find('/') != std::string::npos ? file : std::string(Y9_SOURCE_DIR) + "/configs/models/" + file;
}

using Threads = testutil::OmpThreads;
using testutil::same_bits;

struct Fixture {
  std::shared_ptr<graph::Model> model;
  graph::Detect* head = nullptr;
  std::vector<Tensor> head_inputs;  // random maps of the head's input shapes at `img` px, batch `b`
};

Fixture make(const std::string& yaml, int64_t b, int64_t img) {
  Fixture f;
  f.model = graph::Model::from_yaml(cfg(yaml));
  graph::fuse(*f.model);
  f.model->eval();
  f.head = dynamic_cast<graph::Detect*>(f.model->layer(f.model->num_layers() - 1));
  const auto dims = f.model->trace(img, img);
  uint64_t seed = 11;
  for (int from : f.model->config().layers.back().from_abs) {
    const graph::Dims d = dims.at(static_cast<size_t>(from)).at(0);
    f.head_inputs.push_back(testutil::random_tensor({b, d.c, d.h, d.w}, seed++, -2, 2, engine::DType::F32));
  }
  return f;
}

TEST(HeadInterOp, AppliesToSmallCpuInferenceWithSeveralThreads) {
  Fixture f = make("gelan-t.yaml", 1, 128);
  ASSERT_NE(f.head, nullptr);
  ASSERT_EQ(f.head_inputs.size(), 3u);
  EXPECT_EQ(f.head_inputs[0].size(2) * f.head_inputs[0].size(3), 16 * 16);
  Threads t(2);
  {
    engine::autograd::NoGradGuard ng;
    EXPECT_TRUE(f.head->inter_op(f.head_inputs));
    {
      Threads one(1);
      EXPECT_FALSE(f.head->inter_op(f.head_inputs));  // one thread: nothing to share
    }
    Fixture big = make("gelan-t.yaml", 1, 640);  // 80 x 80 = 6400 cells: each conv splits well
    EXPECT_FALSE(big.head->inter_op(big.head_inputs));
    Fixture b4 = make("gelan-t.yaml", 8, 128);  // 8 x 256 = 2048 cells
    EXPECT_FALSE(b4.head->inter_op(b4.head_inputs));
    std::atomic<int> nested{0};
    ops::run_concurrently(std::vector<std::function<void()>>(2, [&] { nested += f.head->inter_op(f.head_inputs); }));
    EXPECT_EQ(nested.load(), 0);  // already inside a parallel region
  }
  EXPECT_FALSE(f.head->inter_op(f.head_inputs));  // grad enabled: training keeps its serial order
  engine::autograd::NoGradGuard ng;
  f.model->train();
  EXPECT_FALSE(f.head->inter_op(f.head_inputs));  // train mode without grad: BatchNorm statistics
  f.model->eval();
  EXPECT_TRUE(f.head->inter_op(f.head_inputs));
}

// The weighed speed-up: 1 on one thread; gelan-t's single head is led by its level-0 class chain
// (1.67 on 2 threads, so it is split only on small maps); yolov9-t's dual head balances exactly
// (its two branches cost the same), so it runs concurrently at 640 px too.
TEST(HeadInterOp, WeighsTheChainsBalance) {
  Fixture t = make("gelan-t.yaml", 1, 640), d = make("yolov9-t.yaml", 1, 640);
  EXPECT_DOUBLE_EQ(t.head->inter_op_speedup(t.head_inputs, 1), 1.0);
  const double st = t.head->inter_op_speedup(t.head_inputs, 2);
  EXPECT_GT(st, 1.5);
  EXPECT_LT(st, 1.8);
  EXPECT_DOUBLE_EQ(d.head->inter_op_speedup(d.head_inputs, 2), 2.0);
  EXPECT_GT(d.head->inter_op_speedup(d.head_inputs, 4), 3.0);
  EXPECT_EQ(t.head->chain_order().size(), 6u);
  EXPECT_EQ(d.head->chain_order().size(), 12u);
  Threads two(2);
  engine::autograd::NoGradGuard ng;
  EXPECT_FALSE(t.head->inter_op(t.head_inputs));
  EXPECT_TRUE(d.head->inter_op(d.head_inputs));
  std::vector<Tensor> missing(t.head_inputs.begin(), t.head_inputs.end() - 1);
  EXPECT_FALSE(t.head->inter_op(missing));
  EXPECT_THROW(t.head->inter_op_speedup(missing, 2), engine::ShapeError);
}

// The same head inputs through the concurrent head (2 threads; it really runs on 2, as
// ops::concurrent_runs counts) and the serial head (1 thread): raw maps and decoded boxes agree bit
// for bit. A dual-head model (yolov9-t: 2 branches x 3 levels = 12 chains) too.
TEST(HeadInterOp, ConcurrentHeadEqualsSerialHeadBitForBit) {
  for (const char* yaml : {"gelan-t.yaml", "yolov9-t.yaml"}) {
    Fixture f = make(yaml, 1, 128);
    engine::autograd::NoGradGuard ng;
    graph::HeadOutput serial, concurrent;
    {
      Threads one(1);
      ASSERT_FALSE(f.head->inter_op(f.head_inputs));
      serial = f.head->forward(f.head_inputs);
    }
    {
      Threads two(2);
      ASSERT_TRUE(f.head->inter_op(f.head_inputs));
      const int64_t runs = ops::concurrent_runs();
      concurrent = f.head->forward(f.head_inputs);
      EXPECT_EQ(ops::concurrent_runs(), runs + 1);
    }
    ASSERT_EQ(serial.raw.size(), concurrent.raw.size());
    for (size_t b = 0; b < serial.raw.size(); ++b) {
      ASSERT_EQ(serial.raw[b].size(), concurrent.raw[b].size());
      for (size_t l = 0; l < serial.raw[b].size(); ++l)
        EXPECT_TRUE(same_bits(serial.raw[b][l], concurrent.raw[b][l])) << yaml << " raw " << b << "." << l;
    }
    ASSERT_EQ(serial.decoded.size(), concurrent.decoded.size());
    for (size_t b = 0; b < serial.decoded.size(); ++b)
      EXPECT_TRUE(same_bits(serial.decoded[b], concurrent.decoded[b])) << yaml << " decoded " << b;
  }
}

// A whole fused gelan-t pass at batch 1 on 2 threads (concurrent head) matches the 1-thread pass
// (the backbone's larger convs run on 2-thread primitives there, which give the same bits too,
// but only closeness is asserted for the whole pass).
TEST(HeadInterOp, WholeModelPassMatchesOneThread) {
  Fixture f = make("gelan-t.yaml", 1, 128);
  const Tensor x = testutil::random_tensor({1, 3, 128, 128}, 5, 0, 1, engine::DType::F32);
  engine::autograd::NoGradGuard ng;
  graph::ModelOutput one, two;
  {
    Threads t(1);
    one = f.model->forward(x);
  }
  {
    Threads t(2);
    two = f.model->forward(x);
  }
  ASSERT_EQ(one.decoded.size(), two.decoded.size());
  for (size_t b = 0; b < one.decoded.size(); ++b)
    EXPECT_TRUE(testutil::all_close(two.decoded[b], one.decoded[b], 1e-4, 1e-4)) << b;
}

/// gelan-t with a 40-channel first head level (layer 15), off the 16-channel block: its chains
/// read a plain map and lay out their convolutions by the forward's blocked scope (per thread).
std::string gelan_t_odd_level() {
  std::ifstream in(cfg("gelan-t.yaml"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const std::string from = "[-1, 1, RepNCSPELAN4, [64, 64, 32, 3]],                  # 15";
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos);
  if (at != std::string::npos) text.replace(at, from.size(), "[-1, 1, RepNCSPELAN4, [40, 64, 32, 3]],  # 15");
  const std::string path =
      (std::filesystem::temp_directory_path() / ("y9_gelan_t_odd_" + std::to_string(::getpid()) + ".yaml")).string();
  std::ofstream(path) << text;
  return path;
}

// The overlapped head (graph::Model::forward at batch 1 on 2 threads: a level's chains start on the
// second thread while the first computes the later levels) returns the bits of the same forward
// with the head after the layers (HeadOverlap::Off) and of the 1-thread forward, for a single head
// (gelan-t; and with a 40-channel level, off the block), a dual one (yolov9-t, its auxiliary levels
// computed after the main ones) and yolov9-m (a 360-channel level, off the block: its chains lay out
// their convolutions by the forward's blocked scope on whichever thread runs them; its layers after
// the head's first input are too heavy for HeadOverlap::Auto, Model::kOverlapMaxTailShare, so it
// runs under Always), in the blocked layout and in the plain one; and it runs only where it should.
TEST(HeadInterOp, OverlappedHeadEqualsHeadAfterTheLayers) {
  struct Restore {
    graph::HeadOverlap mode = graph::head_overlap();
    bool blocked = graph::blocked_inference();
    ~Restore() {
      graph::set_head_overlap(mode);
      graph::set_blocked_inference(blocked);
    }
  } restore;
  const Tensor x = testutil::random_tensor({1, 3, 128, 128}, 7, 0, 1, engine::DType::F32);
  const std::string odd = gelan_t_odd_level();
  for (const std::string& yaml : {std::string("gelan-t.yaml"), odd, std::string("yolov9-t.yaml"),
                                  std::string("yolov9-m.yaml")})
    for (bool blocked : {true, false}) {
      SCOPED_TRACE(testing::Message() << yaml << (blocked ? " blocked" : " plain"));
      const bool overlapped = yaml != "yolov9-m.yaml";  // under Auto
      Fixture f = make(yaml, 1, 128);
      graph::set_blocked_inference(blocked);
      engine::autograd::NoGradGuard ng;
      if (!overlapped) {  // Auto leaves it alone
        Threads two(2);
        graph::set_head_overlap(graph::HeadOverlap::Auto);
        const int64_t before = graph::head_overlaps();
        f.model->forward(x);
        EXPECT_EQ(graph::head_overlaps(), before);
      }
      graph::set_head_overlap(graph::HeadOverlap::Off);
      graph::ModelOutput one;
      {
        Threads t(1);
        one = f.model->forward(x);
      }
      Threads two(2);
      int64_t overlaps = graph::head_overlaps();
      const graph::ModelOutput after = f.model->forward(x);
      EXPECT_EQ(graph::head_overlaps(), overlaps);
      for (size_t b = 0; b < after.decoded.size(); ++b)
        EXPECT_TRUE(same_bits(after.decoded[b], one.decoded[b])) << "2 threads against 1, decoded " << b;
      graph::set_head_overlap(overlapped ? graph::HeadOverlap::Auto : graph::HeadOverlap::Always);
      for (int rep = 0; rep < 4; ++rep) {  // the schedule varies from run to run; the bits may not
        overlaps = graph::head_overlaps();
        const graph::ModelOutput over = f.model->forward(x);
        EXPECT_EQ(graph::head_overlaps(), overlaps + 1);
        ASSERT_EQ(after.raw.size(), over.raw.size());
        for (size_t b = 0; b < after.raw.size(); ++b) {
          ASSERT_EQ(after.raw[b].size(), over.raw[b].size());
          for (size_t l = 0; l < after.raw[b].size(); ++l)
            EXPECT_TRUE(same_bits(after.raw[b][l], over.raw[b][l])) << "raw " << b << "." << l;
        }
        ASSERT_EQ(after.decoded.size(), over.decoded.size());
        for (size_t b = 0; b < after.decoded.size(); ++b)
          EXPECT_TRUE(same_bits(after.decoded[b], over.decoded[b])) << "decoded " << b;
      }
    }
  std::filesystem::remove(odd);
  // Under Auto: not at batch 2, on 1 or 3 threads, with gradients, in train mode, or on large maps.
  graph::set_head_overlap(graph::HeadOverlap::Auto);
  graph::set_blocked_inference(true);
  Fixture f = make("gelan-t.yaml", 1, 128);
  const auto ran = [&](const Tensor& in, int threads) {
    Threads t(threads);
    const int64_t before = graph::head_overlaps();
    f.model->forward(in);
    return graph::head_overlaps() > before;
  };
  {
    engine::autograd::NoGradGuard ng;
    EXPECT_TRUE(ran(x, 2));
    EXPECT_FALSE(ran(testutil::random_tensor({2, 3, 96, 128}, 8, 0, 1, engine::DType::F32), 2));
    EXPECT_FALSE(ran(x, 1));
    EXPECT_FALSE(ran(x, 3));
    EXPECT_FALSE(ran(testutil::random_tensor({1, 3, 320, 320}, 9, 0, 1, engine::DType::F32), 2));  // 40 x 40 cells
  }
  EXPECT_FALSE(ran(x, 2));  // grad mode on
  {
    engine::autograd::NoGradGuard ng;
    f.model->train();
    EXPECT_FALSE(ran(x, 2));
    f.model->eval();
  }
}

}  // namespace
