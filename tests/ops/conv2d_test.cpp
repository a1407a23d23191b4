// Unit tests of conv2d: F64 reference path against finite differences (groups, stride, padding,
// dilation, bias, strided input), and the F32 oneDNN path against the F64 reference on the
// forward and on every gradient.
#include <gtest/gtest.h>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "kernels/common/conv.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using engine::Tensor;

struct Case {
  int64_t n, cin, h, w, cout, k, stride, pad, dil, groups;
  bool bias;
};

const Case kCases[] = {
    {2, 3, 7, 6, 4, 3, 1, 1, 1, 1, true},   // plain 3x3 same
    {1, 4, 9, 8, 6, 3, 2, 1, 1, 2, false},  // stride 2, groups 2
    {2, 4, 7, 7, 4, 3, 1, 2, 2, 4, true},   // dilation 2, depthwise
    {1, 3, 5, 6, 5, 1, 1, 0, 1, 1, false},  // 1x1
    {1, 2, 8, 7, 3, 2, 2, 0, 1, 1, true},   // even kernel, odd size, no padding
};

std::vector<int64_t> v2(int64_t a) { return {a, a}; }

Tensor run(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  return ops::conv2d(x, w, b, v2(c.stride), v2(c.pad), v2(c.dil), c.groups);
}

TEST(Conv2d, OutputShape) {
  Tensor x = Tensor::zeros({2, 4, 17, 17}), w = Tensor::zeros({8, 2, 3, 3});
  EXPECT_EQ(ops::conv2d(x, w, Tensor(), {2, 2}, {1, 1}, {1, 1}, 2).shape(), (engine::Shape{2, 8, 9, 9}));
  EXPECT_EQ(ops::conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {2, 2}, 2).shape(), (engine::Shape{2, 8, 13, 13}));
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({8, 3, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2), engine::ShapeError);
  EXPECT_THROW(ops::conv2d(x, w, Tensor::zeros({7}), {1, 1}, {0, 0}, {1, 1}, 2), engine::ShapeError);
}

TEST(Conv2d, ReferenceMatchesHandComputation) {
  // 1x1x3x3 input, 2x2 kernel of ones, no padding: each output is a 2x2 window sum.
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor w = Tensor::ones({1, 1, 2, 2}, DType::F64);
  Tensor b = Tensor::full({1}, 0.5, DType::F64);
  auto y = ops::conv2d(x, w, b).to_vector<double>();
  EXPECT_EQ(y, (std::vector<double>{12.5, 16.5, 24.5, 28.5}));
  auto yf = ops::conv2d(x.to(DType::F32), w.to(DType::F32), b.to(DType::F32)).to_vector<double>();
  EXPECT_EQ(yf, y);
}

TEST(Conv2d, GradcheckF64) {
  uint64_t seed = 10;
  for (const Case& c : kCases) {
    SCOPED_TRACE(testing::Message() << "cin " << c.cin << " k " << c.k << " s " << c.stride << " p " << c.pad
                                    << " d " << c.dil << " g " << c.groups);
    Tensor x = testutil::random_tensor({c.n, c.cin, c.h, c.w}, seed++);
    Tensor w = testutil::random_tensor({c.cout, c.cin / c.groups, c.k, c.k}, seed++);
    std::vector<Tensor> in{x, w};
    if (c.bias) in.push_back(testutil::random_tensor({c.cout}, seed++));
    auto f = [&c](const std::vector<Tensor>& v) { return run(c, v[0], v[1], v.size() > 2 ? v[2] : Tensor()); };
    EXPECT_TRUE(testutil::gradcheck(f, in));
  }
}

TEST(Conv2d, GradcheckNonContiguousInput) {
  Tensor x = testutil::random_tensor({2, 7, 3, 6}, 50);  // permuted to [2, 3, 6, 7] inside f
  Tensor w = testutil::random_tensor({4, 3, 3, 3}, 51);
  auto f = [](const std::vector<Tensor>& v) {
    Tensor xs = v[0].permute({0, 2, 3, 1});
    EXPECT_FALSE(xs.is_contiguous());
    return ops::conv2d(xs, v[1].transpose(2, 3), Tensor(), {2, 1}, {1, 0}, {1, 1}, 1);
  };
  EXPECT_TRUE(testutil::gradcheck(f, {x, w}));
}

/// Forward and all gradients of the F32 oneDNN path against the F64 reference path. `wb_atol`:
/// the absolute tolerance of dw and db, which sum n * h_out * w_out products each (the default
/// fits the ~100 of the small cases).
void compare_f32_to_f64(const Case& c, uint64_t seed, bool strided, double wb_atol = 1e-5) {
  Tensor x64 = testutil::random_tensor({c.n, c.cin, c.h, c.w}, seed);
  Tensor w64 = testutil::random_tensor({c.cout, c.cin / c.groups, c.k, c.k}, seed + 1);
  Tensor b64 = c.bias ? testutil::random_tensor({c.cout}, seed + 2) : Tensor();
  auto grads = [&](DType dt) {
    Tensor x = x64.to(dt).detach(), w = w64.to(dt).detach(), b = c.bias ? b64.to(dt).detach() : Tensor();
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    if (b.defined()) b.set_requires_grad(true);
    Tensor xin = strided ? x.transpose(2, 3).contiguous().transpose(2, 3) : x;  // same values, other layout
    Tensor y = run(c, xin, w, b);
    Tensor gy = testutil::random_tensor(y.shape(), seed + 3, -1, 1, dt);
    y.backward(gy);
    return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
  };
  auto r32 = grads(DType::F32);
  auto r64 = grads(DType::F64);
  const char* what[] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; ++i) {
    if (!r64[i].defined()) continue;
    // F32 tolerance: sums of up to ~100 products of O(1) values; 1e-5 relative to the value
    // plus 1e-5 absolute for outputs near zero (FLT_EPSILON * number of terms).
    EXPECT_TRUE(testutil::all_close(r32[i], r64[i], 1e-5, i >= 2 ? wb_atol : 1e-5)) << what[i];
  }
}

TEST(Conv2d, OneDnnF32MatchesF64Reference) {
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    SCOPED_TRACE(testing::Message() << "k " << c.k << " s " << c.stride << " d " << c.dil << " g " << c.groups);
    compare_f32_to_f64(c, seed, false);
    compare_f32_to_f64(c, seed + 10, true);
    seed += 20;
  }
  // A YOLO-like layer, large enough for oneDNN's blocked (JIT) kernels.
  compare_f32_to_f64({2, 32, 20, 20, 64, 3, 2, 1, 1, 1, false}, 900, false);
  compare_f32_to_f64({1, 64, 10, 10, 64, 1, 1, 0, 1, 1, true}, 910, false);
}

/// x rounded to BF16 (round to nearest even) and back, in F64.
Tensor bf16_rounded(const Tensor& x) { return x.detach().to(DType::BF16).to(DType::F64); }

/// Largest |a - b| over the elements (same shape).
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

/// Under BF16 autocast on a CPU with native BF16, an F32 convolution (plain, or blocked as CPU
/// training runs it) rounds x, w and the incoming gradient to BF16 and accumulates in F32: its
/// output and gradients match the F64 convolution of the rounded operands to F32 accuracy, and
/// differ from the F32 convolution by BF16's rounding.
void check_bf16_conv(const Case& c, uint64_t seed, int64_t block) {
  Tensor x64 = testutil::random_tensor({c.n, c.cin, c.h, c.w}, seed);
  Tensor w64 = testutil::random_tensor({c.cout, c.cin / c.groups, c.k, c.k}, seed + 1);
  Tensor b64 = testutil::random_tensor({c.cout}, seed + 2);
  Tensor g64 = testutil::random_tensor({c.n, c.cout, (c.h + 2 * c.pad - c.k) / c.stride + 1,
                                        (c.w + 2 * c.pad - c.k) / c.stride + 1}, seed + 3);
  // The expected values: F64 on the BF16-rounded inputs (the bias is added in F32: not rounded).
  Tensor xr = bf16_rounded(x64), wr = bf16_rounded(w64), br = b64.detach();
  xr.set_requires_grad(true);
  wr.set_requires_grad(true);
  br.set_requires_grad(true);
  Tensor yr = run(c, xr, wr, br);
  yr.backward(bf16_rounded(g64));
  // Ours: F32 under autocast; `autocast` false: plain F32 (for the difference).
  auto ours = [&](bool autocast) {
    Tensor x = x64.to(DType::F32).detach(), w = w64.to(DType::F32).detach(), b = b64.to(DType::F32).detach();
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    ops::AutocastGuard ac(DType::BF16, autocast);
    Tensor y;
    if (block) {  // blocked where the channels allow, as graph::Model's blocked forward
      const Tensor xin = c.cin % block == 0 ? ops::to_blocked(x, block) : x;
      const int64_t ob = c.cout % block == 0 ? block : 0;
      y = ops::conv2d_blocked(xin, w, b, v2(c.stride), v2(c.pad), v2(c.dil), c.groups, /*silu=*/false, ob);
      if (ob) y = ops::from_blocked(y);
    } else {
      y = run(c, x, w, b);
    }
    y.backward(g64.to(DType::F32));
    return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  const auto r = ours(true);
  const auto f = ours(false);
  const Tensor want[] = {yr.detach(), xr.grad(), wr.grad(), br.grad()};
  const char* what[] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(what[i]);
    // Sums of up to c.cin * 9 (y, dx) or n * h_out * w_out (dw, db) products of O(1) values in F32.
    EXPECT_TRUE(testutil::all_close(r[i], want[i], 1e-5, 1e-4));
    if (i < 3) EXPECT_GT(max_abs_diff(f[i], want[i]), 1e-3) << "the F32 result is not BF16's: nothing was rounded?";
  }
}

TEST(Conv2dBf16, CpuAutocastComputesConvolutionsInBf16) {
  if (!ops::cpu_bf16_convolutions(engine::Device::cpu())) GTEST_SKIP() << "this CPU has no native BF16";
  const int64_t block = ops::channel_block(engine::Device::cpu());
  uint64_t seed = 2000;
  for (const Case& c : {Case{2, 32, 12, 12, 32, 3, 1, 1, 1, 1, true}, Case{2, 64, 10, 10, 32, 1, 1, 0, 1, 1, true},
                        Case{1, 32, 16, 16, 64, 3, 2, 1, 1, 1, true}, Case{1, 3, 64, 64, 16, 3, 2, 1, 1, 1, true},
                        Case{1, 64, 2, 2, 64, 3, 1, 1, 1, 1, true}, Case{2, 16, 8, 8, 80, 1, 1, 0, 1, 1, true},
                        Case{2, 24, 8, 8, 24, 3, 1, 1, 1, 1, true}}) {
    SCOPED_TRACE(testing::Message() << "cin " << c.cin << " cout " << c.cout << " k " << c.k << " s " << c.stride);
    check_bf16_conv(c, seed, 0);
    if (block) check_bf16_conv(c, seed, block);
    seed += 10;
  }
}

// The backward weights of a kept BF16 x (Conv2dShape::x_bf16) whose primitive reads x in another
// layout than the kept copy's: here nChw8c, where oneDNN's BF16 kernels take the layouts they pick
// (the kept copy is reordered, kernels/cpu/conv.cpp Cached::in0_bf16). Entries called directly:
// dw and db against F64 on the BF16-rounded x and dy.
TEST(Conv2dBf16, KeptBf16InputInAnotherLayoutIsReordered) {
  if (!ops::cpu_bf16_convolutions(engine::Device::cpu())) GTEST_SKIP() << "this CPU has no native BF16";
  const Case c{2, 16, 6, 6, 16, 3, 1, 1, 1, 1, true};
  const Tensor x64 = testutil::random_tensor({c.n, c.cin, c.h, c.w}, 2200);
  const Tensor w64 = testutil::random_tensor({c.cout, c.cin, c.k, c.k}, 2201);
  const Tensor g64 = testutil::random_tensor({c.n, c.cout, c.h, c.w}, 2202);
  Tensor xr = bf16_rounded(x64), wr = w64.detach().clone(), br = Tensor::zeros({c.cout}, DType::F64);
  wr.set_requires_grad(true);
  br.set_requires_grad(true);
  run(c, xr, wr, br).backward(bf16_rounded(g64));
  kernels::Conv2dShape s{};
  s.n = c.n, s.c_in = c.cin, s.h = c.h, s.w = c.w, s.c_out = c.cout, s.kh = s.kw = c.k;
  s.stride_h = s.stride_w = 1, s.pad_h = s.pad_w = 1, s.dil_h = s.dil_w = 1, s.groups = 1;
  s.h_out = c.h, s.w_out = c.w, s.src_block = s.dst_block = 8, s.bf16 = 1, s.x_bf16 = 1;
  const Tensor xk = ops::to_blocked(x64.to(DType::F32), 8).to(DType::BF16).contiguous();  // the kept copy
  const Tensor dy = ops::to_blocked(g64.to(DType::F32), 8).contiguous();
  const Tensor w = w64.to(DType::F32).contiguous();
  Tensor dw = Tensor::empty(w.shape(), DType::F32), db = Tensor::empty({c.cout}, DType::F32);
  auto k = engine::kernel(kernels::kConv2dBackward, DType::F32, engine::Device::cpu());
  for (int call = 0; call < 2; ++call) {  // the second call reuses the cached entry and its buffers
    k.fn(k.ctx, s, DType::F32, xk.data_ptr(), dy.data_ptr(), w.data_ptr(), nullptr, dw.data_ptr(), db.data_ptr(),
         nullptr);
    EXPECT_TRUE(testutil::all_close(dw, wr.grad(), 1e-5, 1e-4)) << "call " << call;
    EXPECT_TRUE(testutil::all_close(db, br.grad(), 1e-5, 1e-4)) << "call " << call;
  }
}

TEST(Conv2dBf16, OnlyBf16AutocastOnCpuF32ChangesTheMath) {
  Tensor x = testutil::random_tensor({1, 16, 8, 8}, 2100, -1, 1, DType::F32);
  Tensor w = testutil::random_tensor({16, 16, 3, 3}, 2101, -1, 1, DType::F32);
  const Tensor y = ops::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  {
    ops::AutocastGuard ac(DType::F16);  // F16 autocast leaves CPU convolutions alone
    EXPECT_FALSE(ops::cpu_bf16_conv(x));
    EXPECT_EQ(max_abs_diff(ops::conv2d(x, w, Tensor(), {1, 1}, {1, 1}), y), 0.0);
  }
  ops::AutocastGuard ac(DType::BF16);
  EXPECT_FALSE(ops::cpu_bf16_conv(x.to(DType::F64)));  // F64 stays F64
  EXPECT_EQ(ops::cpu_bf16_conv(x), ops::cpu_bf16_convolutions(engine::Device::cpu()));
  {
    ops::AutocastGuard off(DType::BF16, false);
    EXPECT_FALSE(ops::cpu_bf16_conv(x));
  }
}

// Each thread reuses one buffer per operand for oneDNN's layout reorders up to 8 MiB and
// gives larger operands a buffer of their own (kernels/cpu/conv.cpp ReorderBuffer): shapes that
// grow the buffers, then operands over 8 MiB (x, y, dy and dx of 2 x 64 x 130 x 128 F32 are 8.5
// MB), then small ones again, all against the F64 reference.
TEST(Conv2d, OneDnnReorderBuffersAcrossGrowingAndOversizedOperands) {
  compare_f32_to_f64({1, 8, 6, 6, 8, 3, 1, 1, 1, 1, true}, 1000, false);
  compare_f32_to_f64({1, 32, 24, 24, 32, 3, 1, 1, 1, 1, true}, 1010, false);  // grows every buffer
  // Over 8 MiB. dw and db sum 33,280 products of O(1) values each in F32: 1e-3 absolute (2e-4
  // measured; 2e-7 x 33,280 x E|x dy| = 1.7e-3 is the usual F32 summation bound).
  compare_f32_to_f64({2, 64, 130, 128, 64, 1, 1, 0, 1, 1, true}, 1020, false, 1e-3);
  compare_f32_to_f64({1, 16, 12, 12, 16, 3, 2, 1, 1, 1, false}, 1030, false);  // reuses them
}

// conv2d_silu: without gradients one fused kernel (oneDNN swish post-op in F32, reference loops
// in F64) against silu(conv2d(...)) in F64; with gradients the two-op graph, identical to it.
TEST(Conv2dSiLU, FusedInferenceMatchesConvThenSiLU) {
  uint64_t seed = 2000;
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({2, 32, 20, 20, 64, 3, 2, 1, 1, 1, true});   // blocked JIT kernels, bias
  cases.push_back({1, 64, 10, 10, 48, 1, 1, 0, 1, 1, false});  // 1x1 without bias
  // gelan-t's 24-channel RepNBottleneck convolutions at 128 px (NCHW operands that oneDNN runs
  // channels-last: the small reorders are CachedReorder::transpose), at batch 1 and 2.
  cases.push_back({1, 24, 6, 8, 24, 3, 1, 1, 1, 1, true});
  cases.push_back({2, 24, 6, 8, 24, 3, 1, 1, 1, 1, true});
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "n " << c.n << " cin " << c.cin << " k " << c.k << " s " << c.stride << " d "
                                    << c.dil << " g " << c.groups << " bias " << c.bias);
    Tensor x = testutil::random_tensor({c.n, c.cin, c.h, c.w}, seed++, -2, 2);
    Tensor w = testutil::random_tensor({c.cout, c.cin / c.groups, c.k, c.k}, seed++);
    Tensor b = c.bias ? testutil::random_tensor({c.cout}, seed++) : Tensor();
    const Tensor want = ops::silu(run(c, x, w, b));  // F64 two-op reference
    engine::autograd::NoGradGuard ng;
    const Tensor y64 = ops::conv2d_silu(x, w, b, v2(c.stride), v2(c.pad), v2(c.dil), c.groups);
    EXPECT_TRUE(testutil::all_close(y64, want, 1e-14, 1e-14)) << "F64";
    const Tensor y32 = ops::conv2d_silu(x.to(DType::F32), w.to(DType::F32), c.bias ? b.to(DType::F32) : Tensor(),
                                        v2(c.stride), v2(c.pad), v2(c.dil), c.groups);
    ASSERT_EQ(y32.dtype(), DType::F32);
    ASSERT_EQ(y32.shape(), want.shape());
    // F32: the conv's own 1e-5 (see compare_f32_to_f64) plus oneDNN's swish (a few ulps).
    EXPECT_TRUE(testutil::all_close(y32, want, 2e-5, 2e-5)) << "F32";
  }
}

TEST(Conv2dSiLU, WithGradientsIsTheDifferentiableTwoOpGraph) {
  const Case c{2, 4, 7, 6, 6, 3, 1, 1, 1, 2, true};
  Tensor x = testutil::random_tensor({c.n, c.cin, c.h, c.w}, 2100, -1, 1, DType::F32);
  Tensor w = testutil::random_tensor({c.cout, c.cin / c.groups, c.k, c.k}, 2101, -1, 1, DType::F32);
  Tensor b = testutil::random_tensor({c.cout}, 2102, -1, 1, DType::F32);
  Tensor w2 = w.clone();
  w.set_requires_grad(true);
  w2.set_requires_grad(true);
  const Tensor y = ops::conv2d_silu(x, w, b, v2(1), v2(1), v2(1), c.groups);
  ASSERT_TRUE(y.requires_grad());
  const Tensor want = ops::silu(ops::conv2d(x, w2, b, v2(1), v2(1), v2(1), c.groups));
  EXPECT_EQ(y.to_vector<float>(), want.to_vector<float>());
  y.backward(Tensor::ones(y.shape(), DType::F32));
  want.backward(Tensor::ones(want.shape(), DType::F32));
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().to_vector<float>(), w2.grad().to_vector<float>());
  // Gradient check of the whole op in F64.
  auto f = [](const std::vector<Tensor>& v) { return ops::conv2d_silu(v[0], v[1], v[2], {2, 2}, {1, 1}); };
  EXPECT_TRUE(testutil::gradcheck(f, {testutil::random_tensor({1, 3, 6, 5}, 2103),
                                      testutil::random_tensor({4, 3, 3, 3}, 2104),
                                      testutil::random_tensor({4}, 2105)}));
}

// A frozen weight (engine::Storage::freeze, as graph::fuse leaves the folded weights): the fused
// F32 kernel reorders it into its primitive's layout once and keeps that copy in the storage's
// DerivedData; the output is bit-identical to the unfrozen call, and a write through an in-place
// method thaws the storage, so the next call sees the new values (no stale copy).
TEST(Conv2dSiLU, FrozenWeightIsReorderedOnceAndAWriteThawsIt) {
  engine::autograd::NoGradGuard ng;
  const Tensor x = testutil::random_tensor({1, 32, 14, 14}, 2200, -2, 2, DType::F32);
  const Tensor b = testutil::random_tensor({64}, 2201, -1, 1, DType::F32);
  Tensor w = testutil::random_tensor({64, 32, 3, 3}, 2202, -0.2, 0.2, DType::F32);
  auto conv = [&](const Tensor& wt) { return ops::conv2d_silu(x, wt, b, v2(1), v2(1)); };
  const Tensor plain = conv(w);
  EXPECT_EQ(w.storage()->derived(), nullptr);
  w.storage()->freeze();
  ASSERT_NE(w.storage()->derived(), nullptr);
  EXPECT_EQ(conv(w).to_vector<float>(), plain.to_vector<float>());
  // oneDNN's AVX2/AVX-512 kernels take 32 -> 64 channels in a blocked weight layout: one kept copy.
  EXPECT_EQ(w.storage()->derived()->size(), 1u);
  EXPECT_EQ(conv(w).to_vector<float>(), plain.to_vector<float>());  // served from the copy
  EXPECT_EQ(w.storage()->derived()->size(), 1u);

  w.mul_(-0.5);  // thaws: the kept copy is dropped with the derived data
  EXPECT_FALSE(w.storage()->frozen());
  const Tensor fresh = conv(w.clone());  // a new, unfrozen storage with the same values
  EXPECT_EQ(conv(w).to_vector<float>(), fresh.to_vector<float>());
  EXPECT_NE(fresh.to_vector<float>(), plain.to_vector<float>());
  w.storage()->freeze();  // frozen again: reordered from the new values
  EXPECT_EQ(conv(w).to_vector<float>(), fresh.to_vector<float>());
  w.copy_(testutil::random_tensor(w.shape(), 2202, -0.2, 0.2, DType::F32));  // back to the first values
  EXPECT_FALSE(w.storage()->frozen());
  EXPECT_EQ(conv(w).to_vector<float>(), plain.to_vector<float>());
}

// Training with a frozen weight (the trainer freezes its flat parameters between two optimizer
// steps): the forward and backward-data kernels keep the weight in their primitives' layouts, in
// the plain and the blocked layout, with y and dx bit-identical to an unfrozen weight's. A raw
// write after note_write() and a new freeze starts a new generation: the kept copies are derived
// again from the new bytes (in their memory: still one entry), never served stale.
TEST(Conv2d, FrozenTrainingWeightKeepsItsLayoutsPerGeneration) {
  for (const bool blocked : {false, true}) {
    SCOPED_TRACE(blocked ? "blocked" : "plain");
    const Tensor x0 = testutil::random_tensor({2, 32, 10, 10}, 2300, -1, 1, DType::F32);
    const Tensor b = testutil::random_tensor({64}, 2301, -1, 1, DType::F32);
    const Tensor g = testutil::random_tensor({2, 64, 10, 10}, 2302, -1, 1, DType::F32);
    Tensor w = testutil::random_tensor({64, 32, 3, 3}, 2303, -0.2, 0.2, DType::F32);
    // y and dx of one forward and backward with weight wt.
    auto step = [&](const Tensor& wt) {
      Tensor x = x0.clone();
      x.set_requires_grad(true);
      const Tensor y = blocked ? ops::from_blocked(ops::conv2d_blocked(ops::to_blocked(x, 16), wt, b, v2(1), v2(1),
                                                                       v2(1), 1, /*silu=*/false, /*out_block=*/16))
                               : ops::conv2d(x, wt, b, v2(1), v2(1));
      y.backward(g);
      return std::make_pair(y.to_vector<float>(), x.grad().to_vector<float>());
    };
    const auto plain = step(w);
    w.storage()->freeze();
    engine::DerivedData* d = w.storage()->derived();
    ASSERT_NE(d, nullptr);
    const uint64_t gen0 = d->generation();
    EXPECT_EQ(step(w), plain);
    // oneDNN's AVX2/AVX-512 kernels take 32 -> 64 channels in blocked weight layouts: one entry.
    EXPECT_EQ(d->size(), 1u);
    EXPECT_EQ(step(w), plain);  // served from the kept copies

    // An optimizer-like raw write: thaw first, write, freeze again.
    w.storage()->note_write();
    EXPECT_FALSE(w.storage()->frozen());
    EXPECT_EQ(w.storage()->derived(), nullptr);
    auto* p = static_cast<float*>(w.data_ptr());
    for (int64_t i = 0; i < w.numel(); ++i) p[i] = -0.5f * p[i] + 0.01f;
    const auto fresh = step(w.clone());  // a new, unfrozen storage with the new values
    ASSERT_NE(fresh, plain);
    EXPECT_EQ(step(w), fresh);  // thawed: no derived data
    w.storage()->freeze();
    ASSERT_EQ(w.storage()->derived(), d);  // the same entries, a new generation
    EXPECT_EQ(d->generation(), gen0 + 1);
    EXPECT_EQ(step(w), fresh);  // derived again from the new bytes
    EXPECT_EQ(d->size(), 1u);
    w.storage()->note_write();
    w.storage()->note_write();  // a no-op when thawed
    w.storage()->freeze();
    EXPECT_EQ(d->generation(), gen0 + 2);
  }
}

TEST(Conv2dSiLU, BadShapesThrowLikeConv2d) {
  engine::autograd::NoGradGuard ng;
  Tensor x = Tensor::zeros({2, 4, 17, 17}), w = Tensor::zeros({8, 2, 3, 3});
  EXPECT_THROW(ops::conv2d_silu(x, Tensor::zeros({8, 3, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2),
               engine::ShapeError);
  EXPECT_THROW(ops::conv2d_silu(x, w, Tensor::zeros({7}), {1, 1}, {0, 0}, {1, 1}, 2), engine::ShapeError);
  EXPECT_THROW(ops::conv2d_silu(x, w.to(DType::F64), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2), engine::ShapeError);
  EXPECT_EQ(ops::conv2d_silu(x, w, Tensor(), {2, 2}, {1, 1}, {1, 1}, 2).shape(), (engine::Shape{2, 8, 9, 9}));
}

TEST(Conv2d, NoGradNoGraph) {
  Tensor x = testutil::random_tensor({1, 2, 4, 4}, 1, -1, 1, DType::F32).set_requires_grad(true);
  Tensor w = testutil::random_tensor({2, 2, 3, 3}, 2, -1, 1, DType::F32);
  engine::autograd::NoGradGuard ng;
  EXPECT_FALSE(ops::conv2d(x, w, Tensor()).requires_grad());
}

}  // namespace
