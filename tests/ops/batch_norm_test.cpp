// Unit tests of batch_norm: training/eval forward against a hand computation, running-stat
// update (momentum, unbiased variance), finite-difference gradients in double for both modes,
// F32 vs F64, strided inputs, and that the update is not recorded by autograd.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd.h"
#include "ops/ops.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using engine::Shape;
using engine::Tensor;

TEST(BatchNorm, TrainForwardAndRunningStatsMatchHandComputation) {
  const int64_t n = 3, c = 4, h = 5, w = 2;
  Tensor x = testutil::random_tensor({n, c, h, w}, 1, -2, 3);
  Tensor g = testutil::random_tensor({c}, 2, 0.5, 1.5), b = testutil::random_tensor({c}, 3);
  Tensor rm = testutil::random_tensor({c}, 4), rv = testutil::random_tensor({c}, 5, 0.5, 2);
  auto rm0 = rm.to_vector<double>(), rv0 = rv.to_vector<double>();
  const double momentum = 0.03, eps = 1e-3;
  auto y = ops::batch_norm(x, g, b, rm, rv, true, momentum, eps).to_vector<double>();
  auto xv = x.to_vector<double>(), gv = g.to_vector<double>(), bv = b.to_vector<double>();
  auto rm1 = rm.to_vector<double>(), rv1 = rv.to_vector<double>();
  const int64_t hw = h * w, m = n * hw;
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) s += xv[(i * c + ch) * hw + k];
    const double mu = s / m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) ss += std::pow(xv[(i * c + ch) * hw + k] - mu, 2);
    const double var_b = ss / m, var_u = ss / (m - 1);
    EXPECT_NEAR(rm1[ch], 0.97 * rm0[ch] + 0.03 * mu, 1e-14);
    EXPECT_NEAR(rv1[ch], 0.97 * rv0[ch] + 0.03 * var_u, 1e-14);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) {
        const int64_t idx = (i * c + ch) * hw + k;
        EXPECT_NEAR(y[idx], (xv[idx] - mu) / std::sqrt(var_b + eps) * gv[ch] + bv[ch], 1e-12);
      }
  }
}

TEST(BatchNorm, EvalUsesRunningStatsAndLeavesThemAlone) {
  const int64_t c = 3;
  Tensor x = testutil::random_tensor({2, c, 3, 3}, 11);
  Tensor g = testutil::random_tensor({c}, 12), b = testutil::random_tensor({c}, 13);
  Tensor rm = testutil::random_tensor({c}, 14), rv = testutil::random_tensor({c}, 15, 0.5, 2);
  auto rm0 = rm.to_vector<double>(), rv0 = rv.to_vector<double>();
  auto y = ops::batch_norm(x, g, b, rm, rv, false, 0.1, 1e-5).to_vector<double>();
  EXPECT_EQ(rm.to_vector<double>(), rm0);
  EXPECT_EQ(rv.to_vector<double>(), rv0);
  auto xv = x.to_vector<double>(), gv = g.to_vector<double>(), bv = b.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t ch = (i / 9) % c;
    EXPECT_NEAR(y[i], (xv[i] - rm0[ch]) / std::sqrt(rv0[ch] + 1e-5) * gv[ch] + bv[ch], 1e-12);
  }
}

TEST(BatchNorm, StridedRunningStatsAreUpdated) {
  Tensor x = testutil::random_tensor({2, 3, 4, 4}, 21);
  Tensor stats = Tensor::ones({3, 2}, DType::F64);
  Tensor rm = stats.select(1, 0), rv = stats.select(1, 1);  // strided views
  ASSERT_FALSE(rm.is_contiguous());
  ops::batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.5, 1e-5);
  auto sv = stats.to_vector<double>();
  EXPECT_NE(sv[0], 1.0);
  EXPECT_NE(sv[1], 1.0);
}

TEST(BatchNorm, GradcheckTrainAndEval) {
  const int64_t c = 3;
  Tensor x = testutil::random_tensor({2, c, 3, 4}, 31, -2, 2);
  Tensor g = testutil::random_tensor({c}, 32, 0.5, 1.5), b = testutil::random_tensor({c}, 33);
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "train" : "eval");
    // Fresh running stats per evaluation so that the finite differences see identical state.
    auto f = [training](const std::vector<Tensor>& v) {
      Tensor rm = Tensor::full({3}, 0.2, DType::F64), rv = Tensor::full({3}, 1.5, DType::F64);
      return ops::batch_norm(v[0], v[1], v[2], rm, rv, training, 0.03, 1e-3);
    };
    EXPECT_TRUE(testutil::gradcheck(f, {x, g, b}));
    // Non-contiguous x (channels-last storage viewed as NCHW).
    auto fs = [training](const std::vector<Tensor>& v) {
      Tensor rm = Tensor::full({3}, 0.2, DType::F64), rv = Tensor::full({3}, 1.5, DType::F64);
      return ops::batch_norm(v[0].permute({0, 3, 1, 2}), v[1], v[2], rm, rv, training, 0.03, 1e-3);
    };
    EXPECT_TRUE(testutil::gradcheck(fs, {testutil::random_tensor({2, 3, 4, c}, 34, -2, 2), g, b}));
  }
}

// F32 against F64 on [4, 8, 6, 5] (runs of 30: three 8-lane blocks of the CPU sums and a tail of
// 6) and,
// with `large`, on [3, 5, 37, 41] (runs of 1517 with a tail of 5, 4551 terms per channel, the
// values offset by 40 so that a sum that lost the mean's cancellation would show).
void expect_f32_matches_f64(bool large) {
  const int64_t c = large ? 5 : 8;
  const Shape shape = large ? Shape{3, c, 37, 41} : Shape{4, c, 6, 5};
  Tensor x64 = large ? testutil::random_tensor(shape, 45, 38, 42) : testutil::random_tensor(shape, 41, -3, 5);
  Tensor g64 = testutil::random_tensor({c}, 42, 0.5, 1.5), b64 = testutil::random_tensor({c}, 43);
  Tensor gy64 = testutil::random_tensor(shape, 44);
  auto run = [&](DType dt, bool training) {
    Tensor x = x64.to(dt).detach(), g = g64.to(dt).detach(), b = b64.to(dt).detach();
    x.set_requires_grad(true);
    g.set_requires_grad(true);
    b.set_requires_grad(true);
    Tensor rm = Tensor::zeros({c}, dt), rv = Tensor::ones({c}, dt);
    Tensor y = ops::batch_norm(x, g, b, rm, rv, training, 0.03, 1e-3);
    y.backward(gy64.to(dt));
    return std::vector<Tensor>{y.detach(), x.grad(), g.grad(), b.grad(), rm, rv};
  };
  for (bool training : {true, false}) {
    auto a = run(DType::F32, training), r = run(DType::F64, training);
    // F32: ~1e-6 relative per op; channel sums of 120 terms -> 1e-5 relative + 1e-5 absolute.
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(testutil::all_close(a[i], r[i], 1e-5, 1e-5)) << i << (large ? " (large)" : "");
  }
}

TEST(BatchNorm, F32MatchesF64) { expect_f32_matches_f64(false); }
TEST(BatchNorm, F32MatchesF64OnLongChannels) { expect_f32_matches_f64(true); }

TEST(BatchNorm, RunningStatUpdateNotRecordedAndLeavesGraphIntact) {
  Tensor x = testutil::random_tensor({2, 2, 3, 3}, 51).set_requires_grad(true);
  Tensor rm = Tensor::zeros({2}, DType::F64), rv = Tensor::ones({2}, DType::F64);
  Tensor y = ops::batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(rm.requires_grad());
  EXPECT_FALSE(rm.grad_fn());
  y.backward(Tensor::ones(y.shape(), DType::F64));
  // d/dx of sum(normalised x) is 0 in training mode (the mean is subtracted).
  for (double v : x.grad().to_vector<double>()) EXPECT_NEAR(v, 0.0, 1e-12);
}

TEST(BatchNorm, BadArguments) {
  Tensor x = Tensor::zeros({2, 3, 4, 4});
  EXPECT_THROW(ops::batch_norm(x, Tensor::ones({4}), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
               engine::ShapeError);
  EXPECT_THROW(ops::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 1e-5), engine::ShapeError);
  EXPECT_THROW(ops::batch_norm(Tensor::zeros({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
               engine::ShapeError);
}


// --- batch_norm_silu ---------------------------------------------------------------------------

// ops::batch_norm_silu against silu(batch_norm(...)) on the same inputs: the output, every gradient
// and the running stats bit for bit (the CPU's fused entries round as the two-op path does), with the
// fused node in the graph from 64 elements per run (below, the two ops run). Shapes: runs of 1517
// (a whole 1024-element chunk of the kernel, then 493: 61 8-lane blocks and a tail of 5), of 81
// and 64, and of 12 and 1 (unfused); with and without weight and bias.
void expect_fused_bits(DType dt, const Shape& shape, bool training, bool affine) {
  const int64_t c = shape[1];
  Tensor x0 = testutil::random_tensor(shape, 61, -4, 4).to(dt), gy = testutil::random_tensor(shape, 62).to(dt);
  Tensor w0 = testutil::random_tensor({c}, 63, 0.5, 1.5).to(dt), b0 = testutil::random_tensor({c}, 64).to(dt);
  auto run = [&](bool fused) {
    Tensor x = x0.detach().clone().set_requires_grad(true);
    Tensor w = affine ? w0.detach().clone().set_requires_grad(true) : Tensor();
    Tensor b = affine ? b0.detach().clone().set_requires_grad(true) : Tensor();
    Tensor rm = Tensor::full({c}, 0.25, dt), rv = Tensor::full({c}, 1.5, dt);
    Tensor y = fused ? ops::batch_norm_silu(x, w, b, rm, rv, training, 0.03, 1e-3)
                     : ops::silu(ops::batch_norm(x, w, b, rm, rv, training, 0.03, 1e-3));
    if (fused) EXPECT_EQ(y.grad_fn()->name() == "BatchNormSiluBackward", shape[2] * shape[3] >= 64) << x0.str();
    y.backward(gy);
    std::vector<Tensor> r{y.detach(), x.grad(), rm, rv};
    if (affine) r.insert(r.end(), {w.grad(), b.grad()});
    return r;
  };
  const auto a = run(true), r = run(false);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(testutil::all_close(a[i], r[i], 0, 0))
        << "output " << i << " of " << engine::dtype_name(dt) << " " << x0.str()
        << (training ? " training" : " eval") << (affine ? "" : " without weight and bias");
}

TEST(BatchNormSilu, SameBitsAsBatchNormThenSilu) {
  for (DType dt : {DType::F32, DType::F64})
    for (const Shape& s : {Shape{3, 4, 37, 41}, Shape{2, 3, 9, 9}, Shape{3, 2, 8, 8}, Shape{2, 3, 3, 4},
                           Shape{5, 2, 1, 1}})
      for (bool training : {true, false})
        for (bool affine : {true, false}) expect_fused_bits(dt, s, training, affine);
}

TEST(BatchNormSilu, GradcheckF64) {
  const int64_t c = 3;
  Tensor rm = Tensor::full({c}, 0.2, DType::F64), rv = Tensor::full({c}, 1.5, DType::F64);
  for (bool training : {true, false}) {
    auto f = [&](const std::vector<Tensor>& v) {
      Tensor m = rm.clone(), s = rv.clone();
      return ops::batch_norm_silu(v[0], v[1], v[2], m, s, training, 0.03, 1e-3);
    };
    EXPECT_TRUE(testutil::gradcheck(f, {testutil::random_tensor({2, c, 8, 9}, 71, -2, 2),
                                        testutil::random_tensor({c}, 72, 0.5, 1.5), testutil::random_tensor({c}, 73)}))
        << (training ? "training" : "eval");
  }
}

TEST(BatchNormSilu, BadArgumentsThrowAsBatchNorm) {
  Tensor x = Tensor::zeros({2, 3, 8, 8});  // 64 elements per run: the fused path's own checks
  EXPECT_THROW(ops::batch_norm_silu(x, Tensor::ones({4}), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-3),
               engine::ShapeError);
  EXPECT_THROW(ops::batch_norm_silu(x, Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 1e-3), engine::ShapeError);
  EXPECT_THROW(ops::batch_norm_silu(Tensor::zeros({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1,
                                    1e-3),
               engine::ShapeError);
}

}  // namespace
