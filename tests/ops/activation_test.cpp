// Unit tests of silu, sigmoid, relu and bce_with_logits: values against std:: formulas, F32 vs
// F64, gradients against central finite differences in double, strided inputs, broadcasting.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/autograd.h"
#include "ops/ops.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using engine::Tensor;

TEST(Activation, ValuesMatchClosedForm) {
  Tensor x = testutil::random_tensor({3, 5, 7}, 1, -6, 6);
  auto xv = x.to_vector<double>();
  auto s = ops::sigmoid(x).to_vector<double>();
  auto si = ops::silu(x).to_vector<double>();
  auto r = ops::relu(x).to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    double sig = 1.0 / (1.0 + std::exp(-xv[i]));
    EXPECT_NEAR(s[i], sig, 1e-15);
    EXPECT_NEAR(si[i], xv[i] * sig, 1e-14);
    EXPECT_EQ(r[i], xv[i] > 0 ? xv[i] : 0.0);
  }
}

TEST(Activation, LeakyReluValuesAndGradient) {
  Tensor x = testutil::random_tensor({4, 6}, 2, -3, 3);
  auto xv = x.to_vector<double>();
  auto y = ops::leaky_relu(x, 0.1).to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(y[i], xv[i] > 0 ? xv[i] : 0.1 * xv[i]);
  EXPECT_EQ(ops::leaky_relu(Tensor::from_vector<double>({-2.0}, {1})).item<double>(), -0.02);  // default slope
  Tensor xs = x.detach().clone();
  xs.set_requires_grad(true);
  ops::leaky_relu(xs, 0.2).backward(Tensor::ones({4, 6}, DType::F64));
  auto g = xs.grad().to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(g[i], xv[i] > 0 ? 1.0 : 0.2);
  EXPECT_TRUE(testutil::gradcheck([](const std::vector<Tensor>& in) { return ops::leaky_relu(in[0], 0.3); },
                                  {testutil::random_tensor({3, 5}, 3, -1, 1)}));
}

TEST(Activation, F32MatchesF64) {
  Tensor x = testutil::random_tensor({4, 9, 11}, 2, -8, 8);
  Tensor xf = x.to(DType::F32);
  // Tolerance: one F32 rounding of exp and a product, relative to FLT_EPSILON-ish.
  EXPECT_TRUE(testutil::all_close(ops::silu(xf), ops::silu(x), 1e-6, 1e-7));
  EXPECT_TRUE(testutil::all_close(ops::sigmoid(xf), ops::sigmoid(x), 1e-6, 1e-7));
  EXPECT_TRUE(testutil::all_close(ops::relu(xf), ops::relu(xf.to(DType::F64)), 0, 0));
  Tensor t = testutil::random_tensor({4, 9, 11}, 3, 0, 1);
  EXPECT_TRUE(testutil::all_close(ops::bce_with_logits(xf, t.to(DType::F32)), ops::bce_with_logits(x, t), 1e-6, 1e-6));
}

// The F32 CPU path of silu, sigmoid and silu's backward on contiguous rows runs a vectorised e^x
// (kernels/cpu/elementwise.cpp): within a few ulp of the F64 formulas over the whole float range
// that matters, and the special values as the scalar formulas give them.
TEST(Activation, VectorisedF32PathWithinUlpsOfF64) {
  std::vector<float> xs;
  for (int i = -200000; i <= 200000; ++i) xs.push_back(static_cast<float>(i) * 5e-4f);  // [-100, 100]
  for (float v : {-87.4f, -87.3f, -88.4f, 88.3f, 88.4f, 1e-30f, -1e-30f, 0.f, -0.f, 1e-8f})
    xs.push_back(v);
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x = Tensor::from_vector<float>(xs, {n});
  x.set_requires_grad(true);
  Tensor si = ops::silu(x);
  si.backward(Tensor::ones({n}, DType::F32));
  const auto s = ops::sigmoid(x.detach()).to_vector<float>();
  const auto y = si.to_vector<float>();
  const auto g = x.grad().to_vector<float>();
  double worst_s = 0, worst_y = 0, worst_g = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[i];
    const double sig = 1.0 / (1.0 + std::exp(-v));
    const double silu = v * sig, grad = sig * (1 + v * (1 - sig));
    // Relative error, with an absolute floor far below anything a model can see.
    auto err = [](double got, double want) { return std::abs(got - want) / std::max(std::abs(want), 1e-30); };
    worst_s = std::max(worst_s, err(s[i], sig));
    worst_y = std::max(worst_y, err(y[i], silu));
    // The backward's magnitude is at most 1.1 and it crosses zero at x = -1.28, where 1 + x (1 - s)
    // cancels in any F32 evaluation: an absolute error.
    worst_g = std::max(worst_g, std::abs(g[i] - grad));
  }
  EXPECT_LT(worst_s, 5e-7) << "sigmoid";  // 4 ulp of F32 is 4.8e-7
  EXPECT_LT(worst_y, 5e-7) << "silu";
  EXPECT_LT(worst_g, 1e-6) << "silu backward";
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto sp = ops::silu(Tensor::from_vector<float>({inf, -inf, nan, 0.f}, {4})).to_vector<float>();
  EXPECT_EQ(sp[0], inf);
  EXPECT_TRUE(std::isnan(sp[1]));  // -inf * sigmoid(-inf) = -inf * 0, as the formula (and PyTorch)
  EXPECT_TRUE(std::isnan(sp[2]));
  EXPECT_EQ(sp[3], 0.f);
  auto gp = ops::sigmoid(Tensor::from_vector<float>({inf, -inf, nan}, {3})).to_vector<float>();
  EXPECT_EQ(gp[0], 1.f);
  EXPECT_EQ(gp[1], 0.f);
  EXPECT_TRUE(std::isnan(gp[2]));
}

TEST(Activation, Gradcheck) {
  Tensor x = testutil::random_tensor({2, 3, 4, 5}, 4, -3, 3);
  EXPECT_TRUE(testutil::gradcheck([](const std::vector<Tensor>& v) { return ops::silu(v[0]); }, {x}));
  EXPECT_TRUE(testutil::gradcheck([](const std::vector<Tensor>& v) { return ops::sigmoid(v[0]); }, {x}));
  EXPECT_TRUE(testutil::gradcheck([](const std::vector<Tensor>& v) { return ops::relu(v[0]); }, {x}));
}

TEST(Activation, GradcheckStridedInput) {
  Tensor x = testutil::random_tensor({4, 6, 5}, 5, -3, 3);
  auto f = [](const std::vector<Tensor>& v) { return ops::silu(v[0].transpose(0, 2).slice(1, 0, 6, 2)); };
  EXPECT_TRUE(testutil::gradcheck(f, {x}));
  auto g = [](const std::vector<Tensor>& v) { return ops::sigmoid(v[0].permute({2, 0, 1})); };
  EXPECT_TRUE(testutil::gradcheck(g, {x}));
}

TEST(BceWithLogits, ValuesStableForLargeLogits) {
  Tensor x = Tensor::from_vector<double>({-800, -5, 0, 5, 800}, {5});
  Tensor t = Tensor::from_vector<double>({0, 1, 0.5, 0, 1}, {5});
  auto y = ops::bce_with_logits(x, t).to_vector<double>();
  auto xv = x.to_vector<double>(), tv = t.to_vector<double>();
  for (size_t i = 0; i < y.size(); ++i) {
    double ref = std::max(xv[i], 0.0) - xv[i] * tv[i] + std::log1p(std::exp(-std::fabs(xv[i])));
    EXPECT_NEAR(y[i], ref, 1e-12);
    EXPECT_TRUE(std::isfinite(y[i]));
  }
  // Matches the textbook -[t log s + (1-t) log(1-s)] where that is well conditioned.
  EXPECT_NEAR(y[1], -std::log(1.0 / (1.0 + std::exp(5.0))), 1e-12);
}

TEST(BceWithLogits, GradcheckBothInputsAndBroadcast) {
  Tensor x = testutil::random_tensor({3, 4, 5}, 6, -4, 4);
  Tensor t = testutil::random_tensor({3, 4, 5}, 7, 0, 1);
  auto f = [](const std::vector<Tensor>& v) { return ops::bce_with_logits(v[0], v[1]); };
  EXPECT_TRUE(testutil::gradcheck(f, {x, t}));
  Tensor tb = testutil::random_tensor({4, 1}, 8, 0, 1);
  EXPECT_TRUE(testutil::gradcheck(f, {x, tb}));
}

TEST(Activation, RejectsIntegerDtype) {
  EXPECT_THROW(ops::silu(Tensor::zeros({3}, DType::I32)), engine::ShapeError);
  EXPECT_THROW(ops::bce_with_logits(Tensor::zeros({3}), Tensor::zeros({4})), engine::ShapeError);
}

TEST(Activation, NoGraphWithoutRequiresGrad) {
  Tensor x = testutil::random_tensor({3}, 9);
  EXPECT_FALSE(ops::silu(x).requires_grad());
  x.set_requires_grad(true);
  {
    engine::autograd::NoGradGuard ng;
    EXPECT_FALSE(ops::silu(x).requires_grad());
  }
  EXPECT_TRUE(ops::silu(x).requires_grad());
}

}  // namespace
