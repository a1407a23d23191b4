// The blocked channel layout of CPU inference (issue 15 item 1): ops::to_blocked / from_blocked,
// the blocked convolutions (ops::conv2d_blocked, conv2d_blocked_into), and whole fused models run
// blocked (graph::Model::blocked_forward) against the same models run plain NCHW
// (graph::set_blocked_inference(false)). The spatial ops on blocked tensors are in the backend
// sweep (tests/ops/backend_ops_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/fuse.h"
#include "graph/model.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "ops/reduce.h"
#include "tests/graph/graph_ref_util.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using engine::Tensor;
using testutil::same_bits;

std::string cfg(const std::string& file) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + file; }

using graphtest::BlockedLayoutScope;

/// max |a - b| / max(1, max |b|) over the elements (both plain, same shape).
double scaled_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double err = 0, scale = 1;
  for (double v : y) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) err = std::max(err, std::abs(x[i] - y[i]));
  return err / scale;
}

TEST(BlockedLayout, ToAndFromBlockedRoundTripExactly) {
  const Tensor x = testutil::random_tensor({2, 32, 5, 3}, 1, -1, 1, DType::F32);
  for (int64_t block : {8, 16}) {
    const Tensor b = ops::to_blocked(x, block);
    ASSERT_EQ(b.shape(), (engine::Shape{2, 32 / block, 5, 3, block}));
    EXPECT_TRUE(ops::is_blocked(b));
    EXPECT_EQ(ops::logical_shape(b), x.shape());
    // Element (n, c, h, w) sits at [n, c / B, h, w, c % B].
    const auto xv = x.to_vector<float>(), bv = b.to_vector<float>();
    const int64_t n = 1, c = 21, h = 3, w = 2;
    EXPECT_EQ(bv[static_cast<size_t>((((n * (32 / block) + c / block) * 5 + h) * 3 + w) * block + c % block)],
              xv[static_cast<size_t>(((n * 32 + c) * 5 + h) * 3 + w)]);
    EXPECT_TRUE(same_bits(ops::from_blocked(b), x));
    EXPECT_TRUE(same_bits(ops::from_blocked(ops::to_blocked(x.transpose(2, 3), block)), x.transpose(2, 3).contiguous()));
  }
  EXPECT_FALSE(ops::is_blocked(x));
  EXPECT_TRUE(ops::from_blocked(x).is_same(x));
  EXPECT_THROW(ops::to_blocked(x, 12), engine::ShapeError);
  EXPECT_THROW(ops::to_blocked(testutil::random_tensor({1, 20, 2, 2}, 2, -1, 1, DType::F32), 16), engine::ShapeError);
  EXPECT_THROW(ops::to_blocked(Tensor::zeros({32, 4}), 8), engine::ShapeError);
}

// Every pairing of input and output layout, both blocks, with and without SiLU, strided and
// grouped: the values of the plain convolution (oneDNN may pick another implementation for a
// blocked layout: within float rounding).
TEST(BlockedLayout, ConvolutionsMatchThePlainOnes) {
  engine::autograd::NoGradGuard ng;
  struct Geo {
    int64_t cin, cout, k, s, p, g, h, w;
  };
  for (const Geo& geo : {Geo{16, 32, 3, 1, 1, 1, 9, 7}, Geo{32, 16, 1, 1, 0, 1, 6, 6}, Geo{16, 48, 3, 2, 1, 1, 11, 8},
                         Geo{64, 64, 3, 1, 1, 4, 5, 5}, Geo{3, 16, 3, 2, 1, 1, 12, 12}}) {
    const Tensor x = testutil::random_tensor({2, geo.cin, geo.h, geo.w}, 3, -1, 1, DType::F32);
    const Tensor w = testutil::random_tensor({geo.cout, geo.cin / geo.g, geo.k, geo.k}, 4, -0.3, 0.3, DType::F32);
    const Tensor b = testutil::random_tensor({geo.cout}, 5, -0.5, 0.5, DType::F32);
    for (bool silu : {false, true}) {
      const Tensor want = silu ? ops::conv2d_silu(x, w, b, {geo.s}, {geo.p}, {1}, geo.g)
                               : ops::conv2d(x, w, b, {geo.s}, {geo.p}, {1}, geo.g);
      for (int64_t block : {8, 16})
        for (bool in_blocked : {false, true})
          for (bool out_blocked : {false, true}) {
            if (in_blocked && geo.cin % block != 0) continue;
            const std::string what = "cin " + std::to_string(geo.cin) + " cout " + std::to_string(geo.cout) + " g " +
                                     std::to_string(geo.g) + " block " + std::to_string(block) + " in " +
                                     std::to_string(in_blocked) + " out " + std::to_string(out_blocked) + " silu " +
                                     std::to_string(silu);
            const Tensor xin = in_blocked ? ops::to_blocked(x, block) : x;
            const Tensor y = ops::conv2d_blocked(xin, w, b, {geo.s}, {geo.p}, {1}, geo.g, silu, out_blocked ? block : 0);
            EXPECT_EQ(ops::is_blocked(y), out_blocked) << what;
            if (out_blocked) {
              EXPECT_EQ(y.size(4), block) << what;
            }
            EXPECT_LT(scaled_error(ops::from_blocked(y), want), 2e-6) << what;
          }
    }
  }
}

// conv2d_blocked_into writes a channel slice of a batch-1 blocked buffer and nothing else; bad
// outputs and bad layouts are refused.
TEST(BlockedLayout, ConvIntoABlockedSliceAndErrors) {
  engine::autograd::NoGradGuard ng;
  const Tensor x = ops::to_blocked(testutil::random_tensor({1, 16, 6, 5}, 6, -1, 1, DType::F32), 8);
  const Tensor w = testutil::random_tensor({16, 16, 3, 3}, 7, -0.3, 0.3, DType::F32);
  const Tensor b = testutil::random_tensor({16}, 8, -0.5, 0.5, DType::F32);
  const Tensor buf = Tensor::full({1, 4, 6, 5, 8}, 7.0);  // 32 channels: [8, 24) written
  const Tensor slice = buf.narrow(1, 1, 2);
  ops::conv2d_blocked_into(slice, x, w, b, {1}, {1}, {1}, 1, true);
  EXPECT_TRUE(same_bits(slice.contiguous(), ops::conv2d_blocked(x, w, b, {1}, {1}, {1}, 1, true, 8)));
  EXPECT_TRUE(same_bits(buf.narrow(1, 0, 1).contiguous(), Tensor::full({1, 1, 6, 5, 8}, 7.0)));
  EXPECT_TRUE(same_bits(buf.narrow(1, 3, 1).contiguous(), Tensor::full({1, 1, 6, 5, 8}, 7.0)));
  // A plain output slice of the same result.
  const Tensor plain = Tensor::full({1, 20, 6, 5}, 1.0);
  ops::conv2d_blocked_into(plain.narrow(1, 2, 16), x, w, b, {1}, {1}, {1}, 1, true);
  EXPECT_TRUE(same_bits(plain.narrow(1, 2, 16).contiguous(), ops::from_blocked(slice)));

  EXPECT_THROW(ops::conv2d_blocked(x, w, b, {1}, {1}, {1}, 1, true, 12), engine::ShapeError);  // block
  EXPECT_THROW(ops::conv2d_blocked(x, testutil::random_tensor({12, 16, 1, 1}, 9, -1, 1, DType::F32), Tensor(), {1},
                                   {0}, {1}, 1, false, 8),
               engine::ShapeError);  // 12 output channels: not a multiple of 8
  EXPECT_THROW(ops::conv2d_blocked(ops::from_blocked(x).to(DType::F64), w.to(DType::F64), b.to(DType::F64), {1}, {1},
                                   {1}, 1, true, 8),
               engine::ShapeError);  // F32 only
  EXPECT_THROW(ops::conv2d_blocked_into(Tensor::empty({1, 2, 6, 4, 8}), x, w, b, {1}, {1}, {1}, 1, true),
               engine::ShapeError);  // shape
  EXPECT_THROW(ops::conv2d_blocked_into(Tensor::empty({1, 2, 5, 6, 8}).transpose(2, 3), x, w, b, {1}, {1}, {1}, 1,
                                        true),
               engine::ShapeError);  // not contiguous
  // Overlapping the input.
  const Tensor both = Tensor::zeros({1, 4, 6, 5, 8});
  EXPECT_THROW(ops::conv2d_blocked_into(both.narrow(1, 1, 2), both.narrow(1, 0, 2), w, b, {1}, {1}, {1}, 1, true),
               engine::ShapeError);
  // A plain convolution refuses a blocked input (it would read it as NCHW).
  EXPECT_THROW(ops::conv2d(x, w, b, {1}, {1}), engine::ShapeError);
  engine::autograd::set_grad_enabled(true);
  const Tensor wg = w.clone().set_requires_grad(true);
  EXPECT_THROW(ops::conv2d_blocked_into(Tensor::empty({1, 2, 6, 5, 8}), x, wg, b, {1}, {1}, {1}, 1, true),
               engine::Error);  // writes without autograd
  engine::autograd::set_grad_enabled(false);
}

// The blocked pooling's vector rows (16 lanes with AVX-512, 8 with AVX2: kernels/cpu/blocked.cpp)
// give the plain ops' bits: NaN propagates through max pooling (the first NaN of the window, as
// max_pool_takes), -inf and signed zeros stay as they are, and average pooling sums each window in
// the same order; on windows clipped by the padding (SPPELAN's 5 x 5 on a 3 x 4 map), stride 2 and
// stride 1, on one and on several planes.
TEST(BlockedLayout, PoolingVectorRowsGiveThePlainBits) {
  engine::autograd::NoGradGuard ng;
  Tensor x = testutil::random_tensor({2, 48, 5, 7}, 41, -3, 3, DType::F32);
  {
    std::vector<float> v = x.to_vector<float>();
    const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < v.size(); i += 37) v[i] = nan;
    for (size_t i = 5; i < v.size(); i += 53) v[i] = -inf;
    for (size_t i = 11; i < v.size(); i += 61) v[i] = -0.f;
    for (size_t i = 17; i < v.size(); i += 71) v[i] = inf;
    x = Tensor::from_vector(v, x.shape());
  }
  struct Case {
    bool max;
    int64_t k, stride, pad;
  };
  const Case cases[] = {{true, 5, 1, 2}, {true, 3, 2, 1}, {false, 2, 1, 0}, {false, 3, 2, 1}};
  for (int64_t block : {8, 16})
    for (const Case& c : cases) {
      const auto apply = [&](const Tensor& t) {
        return c.max ? ops::max_pool2d(t, c.k, c.stride, c.pad) : ops::avg_pool2d(t, c.k, c.stride, c.pad);
      };
      const Tensor want = apply(x).contiguous();
      const Tensor got = ops::from_blocked(apply(ops::to_blocked(x, block))).contiguous();
      EXPECT_TRUE(same_bits(got, want)) << "block " << block << (c.max ? " max" : " avg") << " k " << c.k
                                        << " stride " << c.stride << " pad " << c.pad;
      // The NaNs reach the output (a check that the case can fail on a dropped NaN).
      if (c.max) {
        bool any_nan = false;
        for (float v : got.to_vector<float>()) any_nan = any_nan || std::isnan(v);
        EXPECT_TRUE(any_nan);
      }
    }
}

// In training the blocked convolution and the blocked spatial ops are differentiable: their
// gradients of input, weight and bias match those of the plain ops (the blocked input's gradient
// comes back blocked), for blocked and plain outputs, with SiLU or not.
TEST(BlockedLayout, GradientsMatchThePlainOps) {
  struct Grads {
    Tensor y, dx, dw, db;
  };
  const Tensor x0 = testutil::random_tensor({2, 16, 7, 6}, 31, -1, 1, DType::F32);
  const Tensor w0 = testutil::random_tensor({16, 8, 3, 3}, 32, -0.3, 0.3, DType::F32);  // groups 2
  const Tensor b0 = testutil::random_tensor({16}, 33, -0.5, 0.5, DType::F32);
  for (int64_t block : {8, 16}) {
    for (int64_t out_block : {int64_t(0), block})
      for (bool silu : {false, true}) {
        const auto run = [&](bool blocked) {
          Tensor x = blocked ? ops::to_blocked(x0, block) : x0.clone();
          x.set_requires_grad(true);
          const Tensor w = w0.clone().set_requires_grad(true), b = b0.clone().set_requires_grad(true);
          Tensor y = blocked ? ops::conv2d_blocked(x, w, b, {2}, {1}, {1}, 2, silu, out_block)
                             : ops::conv2d(x, w, b, {2}, {1}, {1}, 2);
          if (!blocked && silu) y = ops::silu(y);
          EXPECT_EQ(ops::is_blocked(y), blocked && out_block > 0);
          const Tensor yp = ops::from_blocked(y);
          ops::sum(ops::mul(yp, testutil::random_tensor(yp.shape(), 34, -1, 1, DType::F32))).backward();
          EXPECT_EQ(ops::is_blocked(x.grad()), blocked);
          return Grads{yp.detach(), ops::from_blocked(x.grad()), w.grad(), b.grad()};
        };
        const Grads p = run(false), q = run(true);
        const std::string what = "block " + std::to_string(block) + " out_block " + std::to_string(out_block) +
                                 " silu " + std::to_string(silu);
        EXPECT_LT(scaled_error(q.y, p.y), 1e-6) << what;
        EXPECT_LT(scaled_error(q.dx, p.dx), 1e-5) << what;
        EXPECT_LT(scaled_error(q.dw, p.dw), 1e-5) << what;
        EXPECT_LT(scaled_error(q.db, p.db), 1e-5) << what;
      }
    // Pooling and upsampling of a blocked x: the plain ops' gradients, blocked.
    for (int op = 0; op < 3; ++op) {
      const auto apply = [op](const Tensor& t) {
        return op == 0 ? ops::max_pool2d(t, 3, 2, 1) : op == 1 ? ops::avg_pool2d(t, 2, 1, 0) : ops::upsample_nearest(t, 2);
      };
      Tensor xp = x0.clone().set_requires_grad(true), xb = ops::to_blocked(x0, block);
      xb.set_requires_grad(true);
      const Tensor yp = apply(xp), yb = apply(xb);
      ASSERT_TRUE(ops::is_blocked(yb));
      const Tensor r = testutil::random_tensor(yp.shape(), 35, -1, 1, DType::F32);
      ops::sum(ops::mul(yp, r)).backward();
      ops::sum(ops::mul(ops::from_blocked(yb), r)).backward();
      EXPECT_TRUE(same_bits(ops::from_blocked(yb).contiguous(), yp.contiguous())) << op;
      ASSERT_TRUE(ops::is_blocked(xb.grad()));
      EXPECT_TRUE(same_bits(ops::from_blocked(xb.grad()).contiguous(), xp.grad().contiguous())) << op;
    }
  }
}

/// Whether oneDNN creates an F32 Winograd training forward for a blocked 3x3 pad-1 convolution of
/// x `shape` (c -> c channels) in channel block `block`: where kernels/cpu/conv.cpp's
/// training_winograd can select it (oneDNN 2.x has x64 F32 Winograd for nChw16c on AVX-512 only).
bool onednn_winograd(const engine::Shape& shape, int64_t block) {
  using dnnl::memory;
  const auto tag = block == 16 ? memory::format_tag::nChw16c : memory::format_tag::nChw8c;
  const memory::dims x{shape[0], shape[1], shape[2], shape[3]}, w{shape[1], shape[1], 3, 3};
  const memory::desc xd(x, memory::data_type::f32, tag), wd(w, memory::data_type::f32, memory::format_tag::any);
  try {
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
#if DNNL_VERSION_MAJOR >= 3
    dnnl::convolution_forward::primitive_desc pd(eng, dnnl::prop_kind::forward_training,
                                                 dnnl::algorithm::convolution_winograd, xd, wd, xd, {1, 1}, {0, 0},
                                                 {1, 1}, {1, 1});
#else
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_winograd, xd, wd,
                                      xd, {1, 1}, {0, 0}, {1, 1}, {1, 1});
    dnnl::convolution_forward::primitive_desc pd(d, eng);
#endif
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// Training's Winograd (kernels::Conv2dShape::winograd in the forward and both backward directions,
// kernels/cpu/conv.cpp use_winograd / training_winograd): a blocked 3x3 stride-1 convolution of at
// least 1.5 Mi multiply-accumulates per image gives the direct convolution's output and gradients
// within F(4x4, 3x3)'s rounding, and not bit for bit where oneDNN has Winograd (so it ran: block 16
// on AVX-512); a smaller one is the direct convolution bit for bit, counted per image (a batch of 4
// such images too: a batch and its data-parallel shards take the same algorithm). Under BF16
// autocast a Winograd convolution computes in F32: its error against F32 direct stays at F32
// Winograd's, far below BF16's (about 3e-3); where oneDNN has no Winograd (block 8) it keeps its
// BF16 math (the direct convolution's bits under the same autocast).
TEST(BlockedLayout, TrainingWinogradMatchesDirect) {
  if (ops::channel_block(engine::Device::cpu()) == 0) GTEST_SKIP() << "no blocked layout on this CPU";
  struct Grads {
    Tensor y, dx, dw, db;
  };
  struct Case {
    engine::Shape x;
    bool large;  // at least 1.5 Mi MACs per image
  };
  for (int64_t block : {8, 16})
    for (const Case& c : {Case{{2, 32, 24, 20}, true}, Case{{1, 16, 12, 16}, false}, Case{{4, 16, 12, 16}, false}}) {
      const int64_t ch = c.x[1];
      const Tensor x0 = testutil::random_tensor(c.x, 41, -1, 1, DType::F32);
      const Tensor w0 = testutil::random_tensor({ch, ch, 3, 3}, 42, -0.3, 0.3, DType::F32);
      const Tensor b0 = testutil::random_tensor({ch}, 43, -0.5, 0.5, DType::F32);
      const Tensor r = testutil::random_tensor(c.x, 44, -1, 1, DType::F32);  // same shape as y (pad 1)
      for (bool bf16 : {false, true}) {
        if (bf16 && !ops::cpu_bf16_convolutions(engine::Device::cpu())) continue;
        // One training convolution under `autocast` (BF16) with Winograd allowed or not.
        const auto run = [&](bool winograd, bool autocast) {
          ops::AutocastGuard ac(DType::BF16, autocast);
          Tensor x = ops::to_blocked(x0, block);
          x.set_requires_grad(true);
          const Tensor w = w0.clone().set_requires_grad(true), b = b0.clone().set_requires_grad(true);
          const Tensor y = ops::conv2d_blocked(x, w, b, {1}, {1}, {1}, 1, false, block, winograd);
          const Tensor yp = ops::from_blocked(y);
          ops::sum(ops::mul(yp, r)).backward();
          return Grads{yp.detach(), ops::from_blocked(x.grad()), w.grad(), b.grad()};
        };
        const Grads direct = run(false, bf16), wino = run(true, bf16);
        const Grads f32 = bf16 ? run(false, false) : direct;  // F32 direct, the reference under BF16 too
        const std::string what =
            "x " + engine::shape_str(c.x) + " block " + std::to_string(block) + (bf16 ? " under BF16 autocast" : "");
        const double ey = scaled_error(wino.y, f32.y), edx = scaled_error(wino.dx, f32.dx),
                     edw = scaled_error(wino.dw, f32.dw), edb = scaled_error(wino.db, f32.db);
        const double bf16_err = bf16 ? scaled_error(direct.y, f32.y) : 0;
        std::printf("  %s: Winograd vs F32 direct scaled error y %.2e, dx %.2e, dw %.2e, db %.2e%s\n", what.c_str(), ey,
                    edx, edw, edb, bf16 ? (" (BF16 direct's y: " + std::to_string(bf16_err) + ")").c_str() : "");
        if (c.large && onednn_winograd(c.x, block)) {
          EXPECT_LT(ey, 2e-5) << what;
          EXPECT_LT(edx, 2e-5) << what;
          EXPECT_LT(edw, 2e-5) << what;
          EXPECT_LT(edb, 2e-5) << what;
          EXPECT_FALSE(same_bits(wino.y, f32.y)) << what << ": Winograd did not run";
          EXPECT_FALSE(same_bits(wino.dx, f32.dx)) << what << ": the backward data's Winograd did not run";
          EXPECT_FALSE(same_bits(wino.dw, f32.dw)) << what << ": the backward weights' Winograd did not run";
          if (bf16) EXPECT_GT(bf16_err, 50 * ey) << what << ": BF16 direct should round far more";
        } else {  // the direct convolution, in the math the autocast asks for
          EXPECT_TRUE(same_bits(wino.y, direct.y)) << what;
          EXPECT_TRUE(same_bits(wino.dx, direct.dx)) << what;
          EXPECT_TRUE(same_bits(wino.dw, direct.dw)) << what;
          EXPECT_TRUE(same_bits(wino.db, direct.db)) << what;
        }
      }
    }
}

/// The worst scaled_error over the raw maps and decoded outputs of two forwards (raw maps plain).
double output_error(const graph::ModelOutput& got, const graph::ModelOutput& want, const std::string& what) {
  double err = 0;
  EXPECT_EQ(got.raw.size(), want.raw.size()) << what;
  for (size_t k = 0; k < std::min(got.raw.size(), want.raw.size()); ++k) {
    EXPECT_EQ(got.raw[k].size(), want.raw[k].size()) << what;
    for (size_t l = 0; l < std::min(got.raw[k].size(), want.raw[k].size()); ++l) {
      EXPECT_FALSE(ops::is_blocked(got.raw[k][l])) << what;
      err = std::max(err, scaled_error(got.raw[k][l], want.raw[k][l]));
    }
  }
  EXPECT_EQ(got.decoded.size(), want.decoded.size()) << what;
  for (size_t k = 0; k < std::min(got.decoded.size(), want.decoded.size()); ++k)
    err = std::max(err, scaled_error(got.decoded[k], want.decoded[k]));
  return err;
}

// Whole fused models in the blocked layout against the plain forward with ops::concat: gelan-t (ELAN1, AConv,
// RepNCSPELAN4, SPPELAN, DDetect), yolov9-t (its dual head concurrent on 2 threads), gelan-c
// (ADown) and yolov9-c (CBLinear / CBFuse, converted to plain at their edges), at batch 1 (concat
// in place in blocked buffers) and batch 2 (blocked concats), with direct convolutions and with
// Winograd. The outputs depend on the input (checked: another input moves them by more than 1% of
// their scale); the layouts agree to 1e-4 of it (measured: about 1e-5, the rounding of another
// convolution implementation amplified through the layers).
TEST(BlockedLayout, FusedModelsMatchThePlainForward) {
  if (ops::channel_block(engine::Device::cpu()) == 0) GTEST_SKIP() << "no blocked layout on this CPU";
  testutil::OmpThreads threads(2);
  struct Case {
    const char* yaml;
    int64_t img;
  };
  for (const Case& c : {Case{"gelan-t.yaml", 128}, Case{"yolov9-t.yaml", 64}, Case{"gelan-c.yaml", 64},
                        Case{"yolov9-c.yaml", 64}}) {
    auto model = graphtest::lively_model(cfg(c.yaml), c.img, /*fused=*/true);
    for (auto& [name, p] : model->named_parameters()) p.set_requires_grad(false);
    for (int64_t batch : {1, 2}) {
      const std::string what = std::string(c.yaml) + " batch " + std::to_string(batch);
      const Tensor x = testutil::random_tensor({batch, 3, c.img, c.img}, 11, 0, 1, DType::F32);
      // The reference: plain NCHW with ops::concat (grad mode on, so neither the blocked layout nor
      // the in-place concat runs; nothing requires grad, so the same fused kernels do).
      graph::ModelOutput plain, other, nudged;
      {
        BlockedLayoutScope plain_training(std::nullopt, false);
        EXPECT_FALSE(model->blocked_forward(x)) << what;
        const int64_t n0 = graph::blocked_forwards(), c0 = graph::in_place_concats();
        plain = model->forward(x);
        other = model->forward(testutil::random_tensor({batch, 3, c.img, c.img}, 12, 0, 1, DType::F32));
        Tensor xn = x.clone();
        {
          engine::autograd::NoGradGuard ng;
          xn.mul_(1.0 + 1.2e-7);  // about one ulp
        }
        nudged = model->forward(xn);
        EXPECT_EQ(graph::blocked_forwards(), n0) << what;
        EXPECT_EQ(graph::in_place_concats(), c0) << what;
      }
      engine::autograd::NoGradGuard ng;
      // The plain forward's own noise floor: how far a one-ulp change of the input moves it (these
      // calibrated models amplify rounding: up to 1e-2 of the scale). The blocked layout rounds
      // differently at every convolution: within 3x that floor (1e-3 at least), while another
      // input moves the outputs by 10x more than the tolerance.
      const double noise = output_error(nudged, plain, what);
      const double tol = std::max(1e-3, 3 * noise);
      const double moved = output_error(other, plain, what);
      EXPECT_GT(moved, 10 * tol) << what << ": the outputs hardly depend on the input";
      for (bool winograd : {false, true}) {
        BlockedLayoutScope on(true, std::nullopt);
        const bool prev = graph::cpu_winograd();
        graph::set_cpu_winograd(winograd);
        EXPECT_TRUE(model->blocked_forward(x)) << what;
        const int64_t n0 = graph::blocked_forwards();
        const graph::ModelOutput blocked = model->forward(x);
        graph::set_cpu_winograd(prev);
        EXPECT_EQ(graph::blocked_forwards(), n0 + 1) << what;
        const double err = output_error(blocked, plain, what);
        EXPECT_LT(err, tol) << what << " winograd " << winograd;
        std::printf("  %s, winograd %d: blocked vs plain scaled error %.2e (one-ulp noise %.2e, another input %.2e)\n",
                    what.c_str(), winograd, err, noise, moved);
      }
    }
  }
}

// One training step of a whole model, forward and backward, in the blocked layout and plain NCHW
// (issue 15's acceptance: "a test runs the whole yolov9-t forward and backward in both layouts and
// compares"): the raw head maps, every parameter's gradient and every BatchNorm running stat agree
// within float rounding, while another input moves them far more. (On an AVX-512 machine they come
// out bit-identical: oneDNN runs the same blocked kernels behind a plain layout, and BatchNorm's
// sums, added in another order, are double and rounded to float.)
struct TrainStep {
  std::vector<Tensor> raw, grads, buffers;
};

TrainStep train_step(graph::Model& model, const Tensor& x, const std::vector<std::pair<std::string, Tensor>>& start,
                     bool blocked) {
  BlockedLayoutScope sw(std::nullopt, blocked);
  {
    engine::autograd::NoGradGuard ng;
    auto buffers = model.named_buffers();
    for (size_t i = 0; i < buffers.size(); ++i) Tensor(buffers[i].second).copy_(start[i].second);
  }
  for (auto& [name, p] : model.named_parameters()) p.set_grad(Tensor());
  EXPECT_EQ(model.blocked_forward(x), blocked);
  const int64_t n0 = graph::blocked_forwards();
  const graph::ModelOutput out = model.forward(x);
  EXPECT_EQ(graph::blocked_forwards(), n0 + (blocked ? 1 : 0));
  // A scalar of every raw map: sum of raw * a fixed random weight (seeded by its position).
  TrainStep r;
  Tensor loss;
  int64_t seed = 100;
  for (const auto& branch : out.raw)
    for (const Tensor& m : branch) {
      EXPECT_FALSE(ops::is_blocked(m));
      const Tensor w = testutil::random_tensor(m.shape(), seed++, -1, 1, DType::F32);
      const Tensor term = ops::sum(ops::mul(m, w));
      loss = loss.defined() ? ops::add(loss, term) : term;
      r.raw.push_back(m.detach());
    }
  loss.backward();
  for (auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;  // the DFL's fixed projection
    EXPECT_TRUE(p.grad().defined()) << name;
    r.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  }
  for (auto& [name, b] : model.named_buffers()) r.buffers.push_back(b.clone());
  return r;
}

/// The largest scaled_error over matching tensors (undefined ones skipped).
double max_error(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double e = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i].defined() && b[i].defined()) e = std::max(e, scaled_error(a[i], b[i]));
  return e;
}

TEST(BlockedLayout, WholeModelTrainingStepMatchesPlain) {
  if (ops::channel_block(engine::Device::cpu()) == 0) GTEST_SKIP() << "no blocked layout on this CPU";
  testutil::OmpThreads threads(2);
  for (const char* yaml : {"yolov9-t.yaml", "gelan-t.yaml"}) {
    auto model = graph::Model::from_yaml(cfg(yaml));
    model->train();
    std::vector<std::pair<std::string, Tensor>> start;
    for (auto& [name, b] : model->named_buffers()) start.emplace_back(name, b.clone());
    const Tensor x = testutil::random_tensor({2, 3, 64, 64}, 21, 0, 1, DType::F32);
    const TrainStep plain = train_step(*model, x, start, false);
    const TrainStep blocked = train_step(*model, x, start, true);
    Tensor xn = x.clone();
    {
      engine::autograd::NoGradGuard ng;
      xn.mul_(1.0 + 1.2e-7);  // about one ulp
    }
    const TrainStep nudged = train_step(*model, xn, start, false);
    const TrainStep other =
        train_step(*model, testutil::random_tensor({2, 3, 64, 64}, 22, 0, 1, DType::F32), start, false);
    // The tolerance: the plain step's own noise floor, how far a one-ulp change of the input moves
    // it (random weights at 64 px leave 2 x 2 P5 maps, where train-mode BatchNorm amplifies
    // rounding), times 3, and at least 1e-4 (maps, buffers) / 1e-3 (gradients). Where the blocked
    // convolutions run other oneDNN kernels than the plain ones (Y9_CPU_BLOCK=8 on AVX-512), the
    // layouts differ by about that floor.
    const double e_raw = max_error(blocked.raw, plain.raw), e_grad = max_error(blocked.grads, plain.grads),
                 e_buf = max_error(blocked.buffers, plain.buffers);
    const double n_raw = max_error(nudged.raw, plain.raw), n_grad = max_error(nudged.grads, plain.grads),
                 n_buf = max_error(nudged.buffers, plain.buffers);
    const double m_raw = max_error(other.raw, plain.raw), m_grad = max_error(other.grads, plain.grads);
    const double t_raw = std::max(1e-4, 3 * n_raw), t_grad = std::max(1e-3, 3 * n_grad),
                 t_buf = std::max(1e-4, 3 * n_buf);
    std::printf("  %s: blocked vs plain scaled error: raw maps %.2e, gradients %.2e, buffers %.2e (one-ulp noise "
                "%.2e, %.2e, %.2e; another input %.2e, %.2e)\n",
                yaml, e_raw, e_grad, e_buf, n_raw, n_grad, n_buf, m_raw, m_grad);
    EXPECT_LT(e_raw, t_raw) << yaml;
    EXPECT_LT(e_buf, t_buf) << yaml;
    // Each parameter's gradient against its own noise floor (the worst one sets t_grad).
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      const double noise = scaled_error(nudged.grads[i], plain.grads[i]);
      EXPECT_LT(scaled_error(blocked.grads[i], plain.grads[i]), std::max(1e-3, 3 * noise)) << yaml << " gradient " << i;
    }
    EXPECT_LT(e_grad, t_grad) << yaml;
    EXPECT_GT(m_raw, 10 * t_raw) << yaml;
    EXPECT_GT(m_grad, 10 * t_grad) << yaml;
  }
}

// The blocked forward runs only where its conditions hold: CPU F32, its switch on (inference's in
// eval mode with grad mode off, training's otherwise), not observed.
TEST(BlockedLayout, OnlyCpuF32ForwardsWithTheirSwitchOnRunBlocked) {
  if (ops::channel_block(engine::Device::cpu()) == 0) GTEST_SKIP() << "no blocked layout on this CPU";
  BlockedLayoutScope on(true, true);
  auto model = graph::Model::from_yaml(cfg("gelan-t.yaml"));
  model->eval();
  const Tensor x = testutil::random_tensor({1, 3, 64, 64}, 12, 0, 1, DType::F32);
  {
    engine::autograd::NoGradGuard ng;
    EXPECT_TRUE(model->blocked_forward(x));  // unfused (BatchNorm2d left) too
    graph::set_blocked_inference(false);
    EXPECT_FALSE(model->blocked_forward(x));
    graph::set_blocked_inference(true);
  }
  graph::fuse(*model);
  EXPECT_TRUE(model->blocked_forward(x));  // grad mode on: the training switch
  graph::set_blocked_training(false);
  EXPECT_FALSE(model->blocked_forward(x));
  engine::autograd::NoGradGuard ng;
  EXPECT_TRUE(model->blocked_forward(x));
  EXPECT_FALSE(model->blocked_forward(x.to(DType::F64)));
  model->train();
  EXPECT_FALSE(model->blocked_forward(x));
  graph::set_blocked_training(true);
  EXPECT_TRUE(model->blocked_forward(x));
  model->eval();
  const int64_t n0 = graph::blocked_forwards();
  int layers = 0;
  model->forward(x, [&](int64_t, const graph::Block&, const std::vector<Tensor>& y) {
    ++layers;
    for (const Tensor& t : y) EXPECT_FALSE(ops::is_blocked(t));
  });
  EXPECT_GT(layers, 10);
  EXPECT_EQ(graph::blocked_forwards(), n0);  // the observed forward is plain
  model->forward(x);
  EXPECT_EQ(graph::blocked_forwards(), n0 + 1);
}

}  // namespace
