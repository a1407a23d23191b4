// Concat in place (issue 15 item 3): in CPU inference at batch 1 the blocks that concatenate
// (RepNCSPELAN4, ELAN1, RepNCSP, ADown, SPPELAN, the detection heads) write each piece into its
// channel slice of one buffer (graph::UnaryBlock::forward_into, ops::conv2d_silu_into,
// ops::conv2d_into) instead of copying the pieces with ops::concat. The results must be the bits
// of the concat path, which the same model takes with grad mode on (its parameters not requiring
// grad, so the same fused kernels run), in the plain NCHW layout.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/fuse.h"
#include "graph/model.h"
#include "ops/ops.h"
#include "tests/graph/graph_ref_util.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using engine::Tensor;
using testutil::same_bits;

std::string cfg(const std::string& file) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + file; }

// conv2d_silu_into and conv2d_into write the bits of conv2d_silu and conv2d into a channel slice
// of a batch-1 buffer and leave the rest of the buffer alone; a frozen weight (the fused models'
// packed form) too.
TEST(ConcatInPlace, ConvIntoWritesTheSliceOnly) {
  const Tensor x = testutil::random_tensor({1, 16, 12, 10}, 1, -1, 1, DType::F32);
  const Tensor w = testutil::random_tensor({24, 16, 3, 3}, 2, -0.2, 0.2, DType::F32);
  const Tensor b = testutil::random_tensor({24}, 3, -0.5, 0.5, DType::F32);
  engine::autograd::NoGradGuard ng;
  for (bool frozen : {false, true}) {
    if (frozen) w.storage()->freeze();
    for (bool silu : {true, false}) {
      Tensor buf = Tensor::full({1, 40, 12, 10}, 7.0);
      const Tensor slice = buf.narrow(1, 8, 24);
      if (silu)
        ops::conv2d_silu_into(slice, x, w, b, {1, 1}, {1, 1});
      else
        ops::conv2d_into(slice, x, w, b, {1, 1}, {1, 1});
      const Tensor want = silu ? ops::conv2d_silu(x, w, b, {1, 1}, {1, 1}) : ops::conv2d(x, w, b, {1, 1}, {1, 1});
      EXPECT_TRUE(same_bits(slice.contiguous(), want)) << "silu " << silu << " frozen " << frozen;
      EXPECT_TRUE(same_bits(buf.narrow(1, 0, 8).contiguous(), Tensor::full({1, 8, 12, 10}, 7.0)));
      EXPECT_TRUE(same_bits(buf.narrow(1, 32, 8).contiguous(), Tensor::full({1, 8, 12, 10}, 7.0)));
    }
  }
}

TEST(ConcatInPlace, ConvIntoRejectsBadOutputs) {
  const Tensor x = testutil::random_tensor({2, 4, 6, 6}, 4, -1, 1, DType::F32);
  const Tensor w = testutil::random_tensor({8, 4, 1, 1}, 5, -1, 1, DType::F32);
  const Tensor b = Tensor::zeros({8});
  engine::autograd::NoGradGuard ng;
  EXPECT_THROW(ops::conv2d_silu_into(Tensor::empty({2, 8, 6, 5}), x, w, b), engine::ShapeError);  // shape
  EXPECT_THROW(ops::conv2d_into(Tensor::empty({2, 8, 6, 6}, DType::F64), x, w, b), engine::ShapeError);  // dtype
  EXPECT_THROW(ops::conv2d_into(Tensor(), x, w, b), engine::ShapeError);  // undefined
  // A channel slice of a batch-2 buffer is strided: the kernels write contiguous outputs only.
  const Tensor strided = Tensor::empty({2, 16, 6, 6}).narrow(1, 8, 8);
  EXPECT_THROW(ops::conv2d_silu_into(strided, x, w, b), engine::ShapeError);
  ops::conv2d_silu_into(Tensor::empty({2, 8, 6, 6}), x, w, b);  // the right output is accepted
  // An output that overlaps an operand; a disjoint slice of the same buffer is accepted.
  const Tensor buf = Tensor::zeros({1, 16, 6, 6});
  const Tensor x1 = buf.narrow(1, 4, 4), w1 = testutil::random_tensor({8, 4, 1, 1}, 7, -1, 1, DType::F32);
  EXPECT_THROW(ops::conv2d_into(buf.narrow(1, 0, 8), x1, w1, b), engine::ShapeError);
  EXPECT_THROW(ops::conv2d_silu_into(buf.narrow(1, 6, 8), x1, w1, b), engine::ShapeError);
  ops::conv2d_silu_into(buf.narrow(1, 8, 8), x1, w1, b);
  engine::autograd::set_grad_enabled(true);
  const Tensor wg = w.clone().set_requires_grad(true);
  EXPECT_THROW(ops::conv2d_into(Tensor::empty({2, 8, 6, 6}), x, wg, b), engine::Error);  // nothing recorded
  engine::autograd::set_grad_enabled(false);
}

// A block's forward_into: into a strided view (a batch-2 concat slice) it copies forward's result;
// an output of another shape is refused.
TEST(ConcatInPlace, ForwardIntoAStridedViewCopies) {
  auto model = graph::Model::from_yaml(cfg("gelan-t.yaml"));
  graph::fuse(*model);
  model->eval();
  auto* conv = dynamic_cast<graph::Conv*>(model->layer(1));  // Conv(16, 32, 3, 2)
  ASSERT_NE(conv, nullptr);
  const Tensor x = testutil::random_tensor({2, 16, 8, 8}, 6, -1, 1, DType::F32);
  engine::autograd::NoGradGuard ng;
  const Tensor want = conv->forward(x);
  const Tensor buf = Tensor::full({2, 40, 4, 4}, 3.0);
  conv->forward_into(x, buf.narrow(1, 4, 32));
  EXPECT_TRUE(same_bits(buf.narrow(1, 4, 32).contiguous(), want));
  EXPECT_TRUE(same_bits(buf.narrow(1, 36, 4).contiguous(), Tensor::full({2, 4, 4, 4}, 3.0)));
  EXPECT_THROW(conv->forward_into(x, Tensor::empty({2, 32, 4, 5})), engine::ShapeError);
  EXPECT_THROW(conv->forward_into(x, buf.narrow(1, 4, 31)), engine::ShapeError);
}

void expect_same_output(const graph::ModelOutput& a, const graph::ModelOutput& b, const std::string& what) {
  ASSERT_EQ(a.raw.size(), b.raw.size()) << what;
  for (size_t k = 0; k < a.raw.size(); ++k) {
    ASSERT_EQ(a.raw[k].size(), b.raw[k].size()) << what;
    for (size_t l = 0; l < a.raw[k].size(); ++l)
      EXPECT_TRUE(same_bits(a.raw[k][l], b.raw[k][l])) << what << " raw " << k << "." << l;
  }
  ASSERT_EQ(a.decoded.size(), b.decoded.size()) << what;
  for (size_t k = 0; k < a.decoded.size(); ++k)
    EXPECT_TRUE(same_bits(a.decoded[k], b.decoded[k])) << what << " decoded " << k;
}

// Whole batch-1 passes, fused and not: gelan-t (ELAN1, AConv, RepNCSPELAN4 with RepNCSP, SPPELAN,
// DDetect), yolov9-t (its dual head, 12 chains, on 2 threads concurrently) and gelan-c (ADown):
// the in-place pass (grad mode off) returns the bits of the concat pass (grad mode on), and
// really fills buffers in place.
TEST(ConcatInPlace, ModelPassesMatchTheConcatPathBitForBit) {
  testutil::OmpThreads threads(2);
  // The plain NCHW path: the blocked layout (tests/graph/blocked_layout_test.cpp) rounds otherwise.
  graphtest::BlockedLayoutScope plain(false, false);
  struct Case {
    const char* yaml;
    bool fused;
    int64_t img;
  };
  for (const Case& c : {Case{"gelan-t.yaml", true, 128}, Case{"gelan-t.yaml", false, 64},
                        Case{"yolov9-t.yaml", true, 128}, Case{"gelan-c.yaml", true, 64}}) {
    const std::string what = std::string(c.yaml) + (c.fused ? " fused" : " unfused");
    auto model = graphtest::lively_model(cfg(c.yaml), c.img, c.fused);
    for (auto& [name, p] : model->named_parameters()) p.set_requires_grad(false);
    const Tensor x = testutil::random_tensor({1, 3, c.img, c.img}, 9, 0, 1, DType::F32);
    const int64_t n0 = graph::in_place_concats();
    const graph::ModelOutput concat = model->forward(x);  // grad mode on: ops::concat
    EXPECT_EQ(graph::in_place_concats(), n0) << what;
    // The outputs depend on the input (a wrong slice would show).
    const graph::ModelOutput other = model->forward(testutil::random_tensor({1, 3, c.img, c.img}, 8, 0, 1, DType::F32));
    EXPECT_GT(graphtest::scaled_error(other.decoded[0], concat.decoded[0]), 1e-2) << what;
    engine::autograd::NoGradGuard ng;
    const graph::ModelOutput in_place = model->forward(x);
    EXPECT_GE(graph::in_place_concats() - n0, 8) << what;
    expect_same_output(concat, in_place, what);
    // Batch 2 takes the concat path in inference too.
    const int64_t n1 = graph::in_place_concats();
    model->forward(testutil::random_tensor({2, 3, c.img, c.img}, 10, 0, 1, DType::F32));
    EXPECT_EQ(graph::in_place_concats(), n1) << what;
  }
}

}  // namespace
