// concat/split/chunk, upsample_nearest, max_pool2d, avg_pool2d: loop references, finite-difference
// gradients (with strided inputs), F32 vs F64, and ShapeError messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/ops.h"
#include "tests/testutil.h"

using engine::DType;
using engine::Shape;
using engine::Tensor;
using testutil::gradcheck;
using testutil::random_tensor;

namespace {

// Loop reference pooling over a [N,C,H,W] host copy (PyTorch semantics).
Tensor ref_pool(const Tensor& x, int64_t k, int64_t s, int64_t p, bool is_max) {
  auto v = x.to_vector<double>();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t a = 0; a < k; ++a)
            for (int64_t b = 0; b < k; ++b) {
              int64_t h = i * s - p + a, w = j * s - p + b;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;  // -inf / 0 padding
              double e = v[static_cast<size_t>(((n * C + c) * H + h) * W + w)];
              acc = is_max ? std::max(acc, e) : acc + e;
            }
          out.push_back(is_max ? acc : acc / static_cast<double>(k * k));
        }
  return Tensor::from_vector(out, {N, C, Ho, Wo});
}

}  // namespace

TEST(Concat, ForwardBackwardAndStrided) {
  Tensor a = random_tensor({2, 3, 4}, 1), b = random_tensor({2, 2, 4}, 2), c = random_tensor({2, 1, 4}, 3);
  Tensor y = ops::concat({a, b, c}, 1);
  ASSERT_EQ(y.shape(), (Shape{2, 6, 4}));
  auto yv = y.to_vector<double>(), av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t ch = 0; ch < 6; ++ch)
      for (int64_t w = 0; w < 4; ++w) {
        double ref = ch < 3 ? av[(n * 3 + ch) * 4 + w] : ch < 5 ? bv[(n * 2 + ch - 3) * 4 + w] : cv[n * 4 + w];
        EXPECT_EQ(yv[(n * 6 + ch) * 4 + w], ref);
      }
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return ops::concat({x[0], x[1], x[2]}, 1); }, {a, b, c}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return ops::concat({x[0].permute({1, 0, 2}), x[1]}, -1); },
                        {random_tensor({3, 2, 4}, 4), random_tensor({2, 3, 5}, 5)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return ops::concat({x[0], x[0].slice(0, 0, 2)}, 0); },
                        {random_tensor({3, 5}, 6)}));
  EXPECT_TRUE(testutil::all_close(ops::concat({a.to(DType::F32), b.to(DType::F32)}, 1), ops::concat({a, b}, 1), 1e-6, 1e-7));
  try {
    ops::concat({a, random_tensor({3, 2, 4}, 7)}, 1);
    FAIL() << "no throw";
  } catch (const engine::ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("concat"), std::string::npos);
    EXPECT_NE(m.find("[2, 3, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 2, 4]"), std::string::npos) << m;
  }
}

TEST(SplitChunk, ViewsAndGradients) {
  Tensor x = random_tensor({2, 7, 3}, 8);
  auto parts = ops::split(x, {2, 4, 1}, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].shape(), (Shape{2, 4, 3}));
  EXPECT_TRUE(testutil::all_close(parts[1], x.slice(1, 2, 6), 0, 0));
  EXPECT_TRUE(testutil::all_close(ops::concat(parts, 1), x, 0, 0));
  auto ch = ops::chunk(x, 3, 1);  // PyTorch: sizes 3, 3, 1
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[0].size(1), 3);
  EXPECT_EQ(ch[2].size(1), 1);
  EXPECT_EQ(ops::chunk(x, 2, 0).size(), 2u);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        auto p = ops::split(in[0].transpose(0, 1), {3, 4}, 0);
        return ops::mul(p[0], p[1].slice(0, 0, 3));
      },
      {random_tensor({2, 7, 3}, 9)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        auto p = ops::chunk(in[0], 2, -1);
        return ops::add(p[0], ops::mul_scalar(p[1], 3.0));
      },
      {random_tensor({3, 8}, 10)}));
  EXPECT_THROW(ops::split(x, {2, 2}, 1), engine::ShapeError);
  EXPECT_THROW(ops::chunk(x, 0, 1), engine::ShapeError);
}

TEST(Upsample, ForwardGradcheckF32) {
  Tensor x = random_tensor({2, 3, 3, 4}, 11);
  Tensor y = ops::upsample_nearest(x, 2);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 6, 8}));
  auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(yv[(p * 6 + i) * 8 + j], xv[(p * 3 + i / 2) * 4 + j / 2]);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::upsample_nearest(in[0], 2); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::upsample_nearest(in[0].permute({0, 3, 1, 2}), 3); },
                        {random_tensor({1, 3, 4, 2}, 12)}));
  EXPECT_TRUE(testutil::all_close(ops::upsample_nearest(x.to(DType::F32), 2), y, 1e-6, 1e-7));
  EXPECT_THROW(ops::upsample_nearest(random_tensor({3, 4, 5}, 1), 2), engine::ShapeError);
}

// avg_pool2d(2, 1, 0) of YOLOv9's ADown / AConv has its own CPU loop for rows of unit stride; it
// must give the generic kernel's bits (same summation order), which an input whose W stride is 2
// (every other column of a wider tensor) still takes. Negative zeros included.
TEST(Pool, AvgK2S1FastPathIsBitIdenticalToTheGenericKernel) {
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor wide = random_tensor({2, 3, 9, 22}, 77).to(dt);
    Tensor strided = wide.slice(3, 0, 22, 2);  // [2, 3, 9, 11], W stride 2: generic kernel
    Tensor contiguous = strided.contiguous();  // unit W stride: the k2s1 loop
    ASSERT_NE(strided.strides()[3], 1);
    const auto a = ops::avg_pool2d(contiguous, 2, 1, 0).to_vector<double>();
    const auto b = ops::avg_pool2d(strided, 2, 1, 0).to_vector<double>();
    ASSERT_EQ(a.size(), static_cast<size_t>(2 * 3 * 8 * 10));
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i], b[i]) << i;
      EXPECT_EQ(std::signbit(a[i]), std::signbit(b[i])) << i;
    }
    EXPECT_TRUE(testutil::all_close(ops::avg_pool2d(contiguous, 2, 1, 0), ref_pool(contiguous, 2, 1, 0, false), 1e-6, 1e-7));
  }
  Tensor negz = Tensor::full({1, 1, 3, 3}, -0.0, DType::F32);
  for (float v : ops::avg_pool2d(negz, 2, 1, 0).to_vector<float>()) EXPECT_FALSE(std::signbit(v));  // 0 + -0 = +0
}

TEST(Pool, MaxAndAvgMatchReferenceAndGradcheck) {
  struct Cfg { int64_t k, s, p; };
  for (Cfg c : {Cfg{2, 2, 0}, Cfg{3, 2, 1}, Cfg{5, 1, 2}, Cfg{2, 1, 0}, Cfg{3, 3, 1}}) {
    Tensor x = random_tensor({2, 2, 7, 6}, 13 + static_cast<uint64_t>(c.k));
    EXPECT_TRUE(testutil::all_close(ops::max_pool2d(x, c.k, c.s, c.p), ref_pool(x, c.k, c.s, c.p, true), 1e-12, 1e-12))
        << c.k << c.s << c.p;
    EXPECT_TRUE(testutil::all_close(ops::avg_pool2d(x, c.k, c.s, c.p), ref_pool(x, c.k, c.s, c.p, false), 1e-12, 1e-12))
        << c.k << c.s << c.p;
    Tensor xs = random_tensor({1, 2, 5, 6}, 30 + static_cast<uint64_t>(c.k));
    EXPECT_TRUE(gradcheck([c](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], c.k, c.s, c.p); }, {xs}));
    EXPECT_TRUE(gradcheck([c](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], c.k, c.s, c.p); }, {xs}));
    // strided input: NHWC storage viewed as NCHW
    EXPECT_TRUE(gradcheck(
        [c](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0].permute({0, 3, 1, 2}), c.k, c.s, c.p); },
        {random_tensor({1, 5, 6, 2}, 40)}));
    EXPECT_TRUE(gradcheck(
        [c](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0].permute({0, 3, 1, 2}), c.k, c.s, c.p); },
        {random_tensor({1, 5, 6, 2}, 41)}));
    EXPECT_TRUE(testutil::all_close(ops::max_pool2d(x.to(DType::F32), c.k, c.s, c.p), ops::max_pool2d(x, c.k, c.s, c.p), 1e-6, 1e-7));
    EXPECT_TRUE(testutil::all_close(ops::avg_pool2d(x.to(DType::F32), c.k, c.s, c.p), ops::avg_pool2d(x, c.k, c.s, c.p), 1e-6, 1e-7));
  }
  try {
    ops::max_pool2d(random_tensor({2, 3}, 1), 2, 2);
    FAIL() << "no throw";
  } catch (const engine::ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("max_pool2d"), std::string::npos);
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::avg_pool2d(random_tensor({1, 1, 4, 4}, 1), 3, 1, 2), engine::ShapeError);  // pad > k/2
}
