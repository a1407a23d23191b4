// Unit tests of batch_norm: training/eval forward against a hand computation, running-stat
// update (momentum, unbiased variance), finite-difference gradients in double for both modes,
// F32 vs F64, strided inputs, and that the update is not recorded by autograd; batch_norm_silu
// against silu(batch_norm(...)); both on the blocked channel layout against the plain one (values,
// gradients, thread-count independence, the paths computed in F32 or on the plain layout).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "kernels/common/batch_norm.h"
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

// --- blocked channel layout (ops/ops.h: [N, C / B, H, W, B]) ------------------------------------

namespace blocked {

/// x [N, C, H, W] -> a blocked leaf (to_blocked outside autograd) that requires a gradient.
Tensor blocked_leaf(const Tensor& x, int64_t block) {
  Tensor b;
  {
    engine::autograd::NoGradGuard ng;
    b = ops::to_blocked(x.detach(), block);
  }
  b.set_requires_grad(true);
  return b;
}

/// A blocked tensor's values as plain [N, C, H, W] (outside autograd).
Tensor plain(const Tensor& b) {
  engine::autograd::NoGradGuard ng;
  return ops::from_blocked(b.detach()).contiguous();
}

/// y, x's gradient (plain [N, C, H, W]), running stats and, with `affine`, the weight and bias
/// gradients of batch_norm (or batch_norm_silu) on x0, blocked by `block` (0: plain), with the
/// upstream gradient gy. `sync`: passed on (training).
std::vector<Tensor> run_bn(const Tensor& x0, const Tensor& gy, int64_t block, bool silu, bool training, bool affine,
                           const kernels::BatchNormSync* sync = nullptr, std::string* node = nullptr) {
  const int64_t c = x0.size(1);
  const DType dt = x0.dtype(), pdt = dt == DType::F16 || dt == DType::BF16 ? DType::F32 : dt;
  Tensor x = block ? blocked_leaf(x0, block) : x0.detach().clone().set_requires_grad(true);
  Tensor w = affine ? testutil::random_tensor({c}, 63, 0.5, 1.5).to(pdt).set_requires_grad(true) : Tensor();
  Tensor b = affine ? testutil::random_tensor({c}, 64).to(pdt).set_requires_grad(true) : Tensor();
  Tensor rm = testutil::random_tensor({c}, 65).to(pdt), rv = testutil::random_tensor({c}, 66, 0.5, 2).to(pdt);
  Tensor y = silu ? ops::batch_norm_silu(x, w, b, rm, rv, training, 0.03, 1e-3, sync)
                  : ops::batch_norm(x, w, b, rm, rv, training, 0.03, 1e-3, sync);
  EXPECT_EQ(y.shape(), x.shape());
  if (node) *node = y.grad_fn() ? y.grad_fn()->name() : "";
  if (block) {
    Tensor gyb;
    {
      engine::autograd::NoGradGuard ng;
      gyb = ops::to_blocked(gy, block);
    }
    y.backward(gyb);
  } else {
    y.backward(gy);
  }
  EXPECT_TRUE(x.grad().defined());
  if (x.grad().defined()) EXPECT_EQ(x.grad().shape(), x.shape());
  std::vector<Tensor> r{block ? plain(y) : y.detach(), block ? plain(x.grad()) : x.grad(), rm, rv};
  if (affine) r.insert(r.end(), {w.grad(), b.grad()});
  return r;
}

const char* const kOutputNames[] = {"y", "x.grad", "running_mean", "running_var", "weight.grad", "bias.grad"};

}  // namespace blocked

// Blocked batch_norm and batch_norm_silu against the plain ones on the same data: outputs,
// gradients and running stats, F32 and F64, blocks of 8 and 16 (whatever the CPU's channel_block),
// training and eval, with and without weight and bias. Shapes: several blocks and samples with odd
// maps (35 and 81 positions: the unfused batch_norm_silu) and 132 positions (the fused one).
TEST(BatchNormBlocked, MatchesPlain) {
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t block : {8, 16})
      for (const Shape& s : {Shape{3, 32, 5, 7}, Shape{2, 16, 9, 9}, Shape{2, 32, 12, 11}}) {
        Tensor x0 = testutil::random_tensor(s, 81, -3, 4).to(dt), gy = testutil::random_tensor(s, 82).to(dt);
        for (bool silu : {false, true})
          for (bool training : {true, false})
            for (bool affine : {true, false}) {
              std::string node;
              const auto a = blocked::run_bn(x0, gy, block, silu, training, affine, nullptr, &node);
              const auto r = blocked::run_bn(x0, gy, 0, silu, training, affine);
              if (silu) EXPECT_EQ(node == "BatchNormSiluBackward", s[2] * s[3] >= 64) << node;
              const double tol = dt == DType::F64 ? 1e-12 : 1e-5;
              for (size_t i = 0; i < a.size(); ++i)
                EXPECT_TRUE(testutil::all_close(a[i], r[i], tol, tol))
                    << blocked::kOutputNames[i] << " of " << engine::dtype_name(dt) << " " << x0.str() << " block "
                    << block << (silu ? " batch_norm_silu" : " batch_norm") << (training ? " training" : " eval")
                    << (affine ? "" : " without weight and bias");
            }
      }
}

// On blocked x, the fused batch_norm_silu has the bits of silu(batch_norm(...)) (as on plain x):
// [2, 16, 37, 41] has planes of 1517 x 16 elements (23 whole 1024-element chunks of the kernel and
// a tail of 720), [2, 32, 8, 8] the smallest fused map.
TEST(BatchNormBlocked, FusedSameBitsAsBatchNormThenSilu) {
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t block : {8, 16})
      for (const Shape& s : {Shape{2, 16, 37, 41}, Shape{2, 32, 8, 8}}) {
        Tensor x0 = testutil::random_tensor(s, 91, -4, 4).to(dt), gy = testutil::random_tensor(s, 92).to(dt);
        for (bool training : {true, false})
          for (bool affine : {true, false}) {
            auto run = [&](bool fused) {
              const int64_t c = s[1];
              Tensor x = blocked::blocked_leaf(x0, block);
              Tensor w = affine ? testutil::random_tensor({c}, 93, 0.5, 1.5).to(dt).set_requires_grad(true) : Tensor();
              Tensor b = affine ? testutil::random_tensor({c}, 94).to(dt).set_requires_grad(true) : Tensor();
              Tensor rm = Tensor::full({c}, 0.25, dt), rv = Tensor::full({c}, 1.5, dt);
              Tensor y = fused ? ops::batch_norm_silu(x, w, b, rm, rv, training, 0.03, 1e-3)
                               : ops::silu(ops::batch_norm(x, w, b, rm, rv, training, 0.03, 1e-3));
              if (fused) EXPECT_EQ(y.grad_fn()->name(), "BatchNormSiluBackward");
              Tensor gyb;
              {
                engine::autograd::NoGradGuard ng;
                gyb = ops::to_blocked(gy, block);
              }
              y.backward(gyb);
              std::vector<Tensor> r{y.detach(), x.grad(), rm, rv};
              if (affine) r.insert(r.end(), {w.grad(), b.grad()});
              return r;
            };
            const auto a = run(true), r = run(false);
            for (size_t i = 0; i < a.size(); ++i)
              EXPECT_TRUE(testutil::same_bits(a[i], r[i]))
                  << blocked::kOutputNames[i] << " of " << engine::dtype_name(dt) << " " << x0.str() << " block "
                  << block << (training ? " training" : " eval") << (affine ? "" : " without weight and bias");
          }
      }
}

// The blocked kernels' results do not depend on the thread count (per-plane sums added over the
// samples in a fixed order): [4, 32, 24, 24] is above the kernels' parallel threshold.
TEST(BatchNormBlocked, SameBitsForOneAndTwoThreads) {
  const Shape s{4, 32, 24, 24};
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t block : {8, 16})
      for (bool silu : {false, true}) {
        Tensor x0 = testutil::random_tensor(s, 101, -3, 4).to(dt), gy = testutil::random_tensor(s, 102).to(dt);
        std::vector<Tensor> one, two;
        {
          testutil::OmpThreads t(1);
          one = blocked::run_bn(x0, gy, block, silu, true, true);
        }
        {
          testutil::OmpThreads t(2);
          two = blocked::run_bn(x0, gy, block, silu, true, true);
        }
        for (size_t i = 0; i < one.size(); ++i)
          EXPECT_TRUE(testutil::same_bits(one[i], two[i]))
              << blocked::kOutputNames[i] << " of " << engine::dtype_name(dt) << " block " << block
              << (silu ? " batch_norm_silu" : " batch_norm");
      }
}

// F16 x with F32 parameters (autocast) stays blocked: normalised in F32 as on the plain layout.
TEST(BatchNormBlocked, HalfWithFloatParametersMatchesPlain) {
  const Shape s{2, 16, 9, 9};
  Tensor x0 = testutil::random_tensor(s, 111, -3, 4).to(DType::F16);
  Tensor gy = testutil::random_tensor(s, 112).to(DType::F16);
  for (bool training : {true, false}) {
    const auto a = blocked::run_bn(x0, gy, 16, false, training, true);
    const auto r = blocked::run_bn(x0, gy, 0, false, training, true);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(testutil::all_close(a[i].to(DType::F64), r[i].to(DType::F64), 2e-3, 2e-3))
          << blocked::kOutputNames[i] << (training ? " training" : " eval");
  }
}

namespace blocked {
/// A stand-in all-reduce of BatchNormSync: two identical ranks (every sum doubled).
void twice(void*, double* sums, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sums[i] *= 2;
}
}  // namespace blocked

// Synchronised BatchNorm of a blocked x runs on the plain layout (through the differentiable
// conversions): the plain op's values, gradients and running stats.
TEST(BatchNormBlocked, SyncComputedOnThePlainLayout) {
  const kernels::BatchNormSync sync{&blocked::twice, nullptr};
  const Shape s{2, 16, 9, 9};
  Tensor x0 = testutil::random_tensor(s, 121, -3, 4), gy = testutil::random_tensor(s, 122);
  for (bool silu : {false, true}) {
    const auto a = blocked::run_bn(x0, gy, 8, silu, true, true, &sync);
    const auto r = blocked::run_bn(x0, gy, 0, silu, true, true, &sync);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(testutil::all_close(a[i], r[i], 1e-12, 1e-12)) << blocked::kOutputNames[i] << (silu ? " silu" : "");
  }
}

// A strided blocked x (a channel slice of a batch-2 blocked tensor: not contiguous) is normalised
// as the same slice of the plain tensor, and its gradient reaches the whole tensor.
TEST(BatchNormBlocked, StridedChannelSlice) {
  const Shape s{2, 48, 9, 8};
  Tensor x0 = testutil::random_tensor(s, 131, -3, 4), gy = testutil::random_tensor({2, 32, 9, 8}, 132);
  for (bool silu : {false, true}) {
    Tensor xb = blocked::blocked_leaf(x0, 16), xp = x0.detach().clone().set_requires_grad(true);
    Tensor rm = Tensor::zeros({32}, DType::F64), rv = Tensor::ones({32}, DType::F64);
    Tensor rm2 = Tensor::zeros({32}, DType::F64), rv2 = Tensor::ones({32}, DType::F64);
    Tensor sb = xb.narrow(1, 1, 2), sp = xp.narrow(1, 16, 32);
    ASSERT_FALSE(sb.is_contiguous());
    Tensor yb = silu ? ops::batch_norm_silu(sb, Tensor(), Tensor(), rm, rv, true, 0.03, 1e-3)
                     : ops::batch_norm(sb, Tensor(), Tensor(), rm, rv, true, 0.03, 1e-3);
    Tensor yp = silu ? ops::batch_norm_silu(sp, Tensor(), Tensor(), rm2, rv2, true, 0.03, 1e-3)
                     : ops::batch_norm(sp, Tensor(), Tensor(), rm2, rv2, true, 0.03, 1e-3);
    Tensor gyb;
    {
      engine::autograd::NoGradGuard ng;
      gyb = ops::to_blocked(gy, 16);
    }
    yb.backward(gyb);
    yp.backward(gy);
    EXPECT_TRUE(testutil::all_close(blocked::plain(yb), yp, 1e-12, 1e-12)) << silu;
    EXPECT_TRUE(testutil::all_close(blocked::plain(xb.grad()), xp.grad(), 1e-12, 1e-12)) << silu;
    EXPECT_TRUE(testutil::all_close(rv, rv2, 1e-12, 1e-12)) << silu;
  }
}

TEST(BatchNormBlocked, BadArguments) {
  Tensor x = blocked::blocked_leaf(Tensor::zeros({2, 16, 8, 8}), 16).detach();  // 64 per run: the fused path too
  for (bool silu : {false, true}) {
    auto bn = [&](const Tensor& xx, const Tensor& w, bool training) {
      Tensor rm = Tensor::zeros({16}, DType::F64), rv = Tensor::ones({16}, DType::F64);
      return silu ? ops::batch_norm_silu(xx, w, Tensor(), rm, rv, training, 0.1, 1e-3)
                  : ops::batch_norm(xx, w, Tensor(), rm, rv, training, 0.1, 1e-3);
    };
    try {
      bn(x, Tensor::ones({32}, DType::F64), true);  // 32 = x.size(1) * 16 of another x
      ADD_FAILURE() << "no error for a weight of the wrong size";
    } catch (const engine::ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[16]"), std::string::npos) << e.what();
    }
    EXPECT_THROW(bn(x, Tensor::ones({1}, DType::F64), true), engine::ShapeError);
    // One value per channel in training.
    EXPECT_THROW(bn(blocked::blocked_leaf(Tensor::zeros({1, 16, 1, 1}), 8).detach(), Tensor(), true),
                 engine::ShapeError);
  }
}

// The CPU entries on a blocked shape: no synchronised BatchNorm (ops computes it on the plain
// layout), and the block must be 8 or 16 and divide c.
TEST(BatchNormBlocked, KernelRejectsSyncAndBadBlock) {
  const kernels::BatchNormSync sync{&blocked::twice, nullptr};
  Tensor x = Tensor::zeros({2, 2, 3, 8}), w = Tensor::ones({16}), r = Tensor::zeros({16});
  Tensor rm = Tensor::zeros({16}), rv = Tensor::ones({16}), y = Tensor::empty(x.shape(), DType::F64, x.device());
  auto fwd = engine::kernel(kernels::kBatchNormForward, DType::F64, x.device());
  auto bwd = engine::kernel(kernels::kBatchNormBackward, DType::F64, x.device());
  const kernels::BatchNormShape s{2, 16, 3, 8};
  EXPECT_THROW(fwd.fn(fwd.ctx, DType::F64, s, x.data_ptr(), w.data_ptr(), nullptr, rm.data_ptr(), rv.data_ptr(), true,
                      0.1, 1e-3, y.data_ptr(), r.data_ptr(), r.data_ptr(), &sync),
               engine::ShapeError);
  EXPECT_THROW(bwd.fn(bwd.ctx, DType::F64, s, x.data_ptr(), x.data_ptr(), rm.data_ptr(), rv.data_ptr(), w.data_ptr(),
                      true, y.data_ptr(), nullptr, nullptr, &sync),
               engine::ShapeError);
  const kernels::BatchNormShape bad{2, 16, 6, 4};
  EXPECT_THROW(fwd.fn(fwd.ctx, DType::F64, bad, x.data_ptr(), w.data_ptr(), nullptr, rm.data_ptr(), rv.data_ptr(),
                      true, 0.1, 1e-3, y.data_ptr(), r.data_ptr(), r.data_ptr(), nullptr),
               engine::ShapeError);
}

}  // namespace
