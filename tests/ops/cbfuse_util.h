// Shared cases of the ops::cbfuse tests (tests/ops/cbfuse_test.cpp on the CPU,
// tests/kernels/cbfuse_cuda_test.cpp on CUDA): CBLinear-like outputs whose channel slices are the
// routed pieces (several factors, contiguous and NHWC-strided storage, pieces with and without
// gradient), the fused op and the unfused chain it replaces (upsample_nearest + add, pieces in
// order, x last), forward and backward, and a bitwise comparison of the results.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "ops/cbfuse.h"
#include "ops/ops.h"
#include "tests/testutil.h"

namespace cbfuse_test {

using engine::Device;
using engine::DType;
using engine::Shape;
using engine::Tensor;

/// One CBLinear-like source: an output [N, sum(split), H/f, W/f] split along channels; the piece
/// routed to the fusion is split[pick] channels wide (must equal x's C).
struct Source {
  int64_t f;
  std::vector<int64_t> split;
  int pick;
  bool nhwc = false;  ///< stored NHWC (the NCHW view has strides (HWC, 1, WC, C))
  bool grad = true;
};

struct Case {
  std::string name;
  Shape x;  ///< [N, C, H, W]
  std::vector<Source> sources;
  bool x_transposed = false;  ///< x a transpose(2, 3) view of a [N, C, W, H] leaf
  bool x_grad = true;
};

/// The cases: factors 1, 2, 3, 4, rectangular planes, 1 to 10 pieces (10: more than one CUDA
/// launch's group of 8), non-contiguous slices and x, inputs without gradient.
inline std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"one piece f2", {2, 3, 8, 12}, {{2, {3, 5}, 0}}});
  c.push_back({"f1 f2 f4 slices", {2, 3, 8, 12}, {{1, {3, 5}, 0}, {2, {2, 3, 4}, 1}, {4, {3, 3}, 1}}});
  c.push_back({"yolov9-c like", {1, 4, 16, 16}, {{2, {4, 8, 16}, 0}, {4, {4, 8, 16}, 0}, {8, {4, 8, 16}, 0}}});
  c.push_back({"nhwc pieces, strided x",
               {2, 5, 12, 12},
               {{1, {5, 2}, 0, true}, {2, {1, 5}, 1, true}, {3, {5, 5}, 1}, {4, {2, 5, 1}, 1, true}},
               true});
  c.push_back({"no gradient for some", {2, 3, 8, 8}, {{2, {3, 3}, 0, false, false}, {4, {3}, 0}, {1, {1, 3}, 1}},
               false, false});
  c.push_back({"odd sizes f3 f5", {3, 2, 15, 15}, {{3, {2, 1}, 0}, {5, {1, 2}, 1, true}, {1, {2}, 0}}});
  Case many{"ten pieces", {2, 3, 8, 8}, {}};
  for (int i = 0; i < 10; ++i)
    many.sources.push_back({int64_t(1) << (i % 4), {int64_t(i % 3) + 1, 3, 2}, 1, i % 2 == 1, i != 6});
  c.push_back(many);
  return c;
}

/// Forward output and the gradients of the leaves (one per source, then x; undefined when the
/// leaf takes no gradient).
struct Result {
  Tensor out;
  std::vector<Tensor> grads;
};

/// Builds the case's leaves (random, seeded, rounded to dt) on `dev`, runs the fused op or the
/// unfused chain, and back-propagates a fixed random weight.
inline Result run(const Case& c, Device dev, DType dt, bool fused) {
  const int64_t n = c.x[0], h = c.x[2], w = c.x[3];
  std::vector<Tensor> leaves, pieces;
  uint64_t seed = 100;
  for (const Source& s : c.sources) {
    int64_t ctot = 0;
    for (int64_t v : s.split) ctot += v;
    const int64_t ph = h / s.f, pw = w / s.f;
    const Shape shape = s.nhwc ? Shape{n, ph, pw, ctot} : Shape{n, ctot, ph, pw};
    Tensor leaf = testutil::random_tensor(shape, seed++, -2, 2).to(dt).to(dev);
    leaf.set_requires_grad(s.grad);
    Tensor big = s.nhwc ? leaf.permute({0, 3, 1, 2}) : leaf;
    pieces.push_back(ops::split(big, s.split, 1).at(static_cast<size_t>(s.pick)));
    leaves.push_back(leaf);
  }
  const Shape xs = c.x_transposed ? Shape{c.x[0], c.x[1], c.x[3], c.x[2]} : c.x;
  Tensor xl = testutil::random_tensor(xs, seed++, -2, 2).to(dt).to(dev);
  xl.set_requires_grad(c.x_grad);
  leaves.push_back(xl);
  Tensor x = c.x_transposed ? xl.transpose(2, 3) : xl;

  Result r;
  if (fused) {
    r.out = ops::cbfuse(pieces, x);
  } else {  // the unfused CBFuse::forward this op replaces
    Tensor sum;
    for (Tensor p : pieces) {
      if (p.size(2) != h) p = ops::upsample_nearest(p, h / p.size(2));
      sum = sum.defined() ? ops::add(sum, p) : p;
    }
    r.out = sum.defined() ? ops::add(sum, x) : x;
  }
  if (r.out.requires_grad()) r.out.backward(testutil::random_tensor(c.x, 7, -1, 1).to(dt).to(dev));
  for (const Tensor& l : leaves) r.grads.push_back(l.requires_grad() ? l.grad() : Tensor());
  return r;
}

/// Bitwise equality of two tensors of one float dtype (any device): same shape, same values
/// (compared through F64, exact for every float dtype), same zero signs.
inline ::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return ::testing::AssertionFailure() << "one of the tensors is undefined";
  if (!a.defined()) return ::testing::AssertionSuccess();
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shapes " << engine::shape_str(a.shape()) << " and "
                                         << engine::shape_str(b.shape());
  if (a.dtype() != b.dtype()) return ::testing::AssertionFailure() << "dtypes differ: " << a.str() << " " << b.str();
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    if (std::memcmp(&va[i], &vb[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i];
  return ::testing::AssertionSuccess();
}

/// Expects two results to be bitwise equal (output and every gradient).
inline void expect_same(const Result& a, const Result& b) {
  EXPECT_TRUE(bitwise_equal(a.out, b.out)) << "forward";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(bitwise_equal(a.grads[i], b.grads[i])) << "gradient of leaf " << i;
}

}  // namespace cbfuse_test
