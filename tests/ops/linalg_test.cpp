// matmul (batch broadcasting, transposed/strided operands) and softmax/log_softmax: loop
// references, finite-difference gradients, F32 vs F64, ShapeError messages.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "tests/testutil.h"

using engine::DType;
using engine::Shape;
using engine::Tensor;
using testutil::gradcheck;
using testutil::random_tensor;

namespace {

// Reference batched matmul with batch broadcasting, on contiguous host copies.
Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  while (ba.size() < bb.size()) ba.insert(ba.begin(), 1);
  while (bb.size() < ba.size()) bb.insert(bb.begin(), 1);
  Shape bo(ba.size());
  for (size_t i = 0; i < ba.size(); ++i) bo[i] = std::max(ba[i], bb[i]);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  auto av = a.contiguous().to_vector<double>(), bv = b.contiguous().to_vector<double>();
  int64_t nb = engine::shape_numel(bo);
  std::vector<double> out(static_cast<size_t>(nb * M * N), 0.0);
  for (int64_t t = 0; t < nb; ++t) {
    int64_t rem = t, ia = 0, ib = 0, ma = 1, mb = 1;
    for (int d = static_cast<int>(bo.size()) - 1; d >= 0; --d) {
      int64_t c = rem % bo[d];
      rem /= bo[d];
      ia += (ba[d] == 1 ? 0 : c) * ma;
      ib += (bb[d] == 1 ? 0 : c) * mb;
      ma *= ba[d];
      mb *= bb[d];
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += av[ia * M * K + i * K + k] * bv[ib * K * N + k * N + j];
        out[(t * M + i) * N + j] = s;
      }
  }
  Shape so = bo;
  so.push_back(M);
  so.push_back(N);
  return Tensor::from_vector(out, so);
}

}  // namespace

TEST(Matmul, ForwardBroadcastAndTransposedOperands) {
  std::vector<std::pair<Shape, Shape>> cases = {{{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}}, {{1, 4}, {4, 1}}};
  for (auto& [sa, sb] : cases) {
    Tensor a = random_tensor(sa, 1), b = random_tensor(sb, 2);
    EXPECT_TRUE(testutil::all_close(ops::matmul(a, b), ref_matmul(a, b), 1e-12, 1e-12));
    EXPECT_TRUE(testutil::all_close(ops::matmul(a.to(DType::F32), b.to(DType::F32)), ops::matmul(a, b), 1e-5, 1e-6));
  }
  Tensor at = random_tensor({5, 3}, 3), bt = random_tensor({4, 5}, 4);
  EXPECT_TRUE(testutil::all_close(ops::matmul(at.transpose(0, 1), bt.transpose(0, 1)),
                                  ref_matmul(at.transpose(0, 1), bt.transpose(0, 1)), 1e-12, 1e-12));
  // non-BLAS-compatible strides (step-2 slices in both dims) fall back to a copy
  Tensor s = random_tensor({6, 8}, 5);
  Tensor sv = s.slice(0, 0, 6, 2).slice(1, 0, 8, 2);  // [3, 4]
  EXPECT_TRUE(testutil::all_close(ops::matmul(sv, bt), ref_matmul(sv, bt), 1e-12, 1e-12));
}

TEST(Matmul, Gradcheck) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return ops::matmul(x[0], x[1]); },
                        {random_tensor({2, 3, 4}, 6), random_tensor({4, 5}, 7)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& x) { return ops::matmul(x[0], x[1]); },
                        {random_tensor({2, 1, 3, 4}, 8), random_tensor({3, 4, 2}, 9)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& x) { return ops::matmul(x[0].transpose(-1, -2), x[1].slice(1, 0, 6, 2)); },
      {random_tensor({2, 4, 3}, 10), random_tensor({4, 6}, 11)}));
}

TEST(Matmul, ShapeError) {
  try {
    ops::matmul(random_tensor({2, 3}, 1), random_tensor({4, 5}, 2));
    FAIL() << "no throw";
  } catch (const engine::ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("matmul"), std::string::npos);
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::matmul(random_tensor({2, 3, 4}, 1), random_tensor({3, 4, 5}, 2)), engine::ShapeError);
}

TEST(Softmax, ForwardReferenceGradcheckF32) {
  Tensor x = random_tensor({2, 5, 3}, 12, -3, 3);
  for (int64_t dim : {0, 1, 2, -1}) {
    Tensor y = ops::softmax(x, dim), ly = ops::log_softmax(x, dim);
    const int64_t d = dim < 0 ? dim + 3 : dim;
    auto xv = x.to_vector<double>(), yv = y.to_vector<double>(), lyv = ly.to_vector<double>();
    Shape st = {15, 3, 1};
    for (int64_t i = 0; i < 30; ++i) {
      int64_t c = (i / st[d]) % x.size(d);
      int64_t base = i - c * st[d];
      double z = 0;
      for (int64_t j = 0; j < x.size(d); ++j) z += std::exp(xv[base + j * st[d]]);
      EXPECT_NEAR(yv[i], std::exp(xv[i]) / z, 1e-12);
      EXPECT_NEAR(lyv[i], xv[i] - std::log(z), 1e-12);
    }
    EXPECT_TRUE(gradcheck([dim](const std::vector<Tensor>& in) { return ops::softmax(in[0], dim); }, {x}));
    EXPECT_TRUE(gradcheck([dim](const std::vector<Tensor>& in) { return ops::log_softmax(in[0], dim); }, {x}));
    EXPECT_TRUE(testutil::all_close(ops::softmax(x.to(DType::F32), dim), y, 1e-5, 1e-6));
    EXPECT_TRUE(testutil::all_close(ops::log_softmax(x.to(DType::F32), dim), ly, 1e-5, 1e-6));
  }
  // strided input
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::softmax(in[0].permute({2, 0, 1}), 1); },
                        {random_tensor({2, 5, 3}, 13)}));
  // large values stay finite (max subtraction)
  Tensor big = Tensor::from_vector<float>({1000.f, 1001.f, 1002.f}, {3});
  auto bv = ops::softmax(big, 0).to_vector<float>();
  EXPECT_NEAR(bv[2], 1.0 / (1.0 + std::exp(-1.0) + std::exp(-2.0)), 1e-6);
  EXPECT_THROW(ops::softmax(x, 3), engine::ShapeError);
}
