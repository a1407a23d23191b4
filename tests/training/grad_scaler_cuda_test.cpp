// GradScaler on cuda:0 with FP16 gradients (issue 11, AMP under the emulator or a GPU): a small
// autocast-style FP16 computation (F32 master parameters cast to F16, F16 elementwise forward,
// the loss reduced in F32), scaled backward so that the F16 gradients overflow at the large
// scales (the natural inf of AMP), unscaled into the F32 master gradient buffer by the CUDA
// amp_unscale entry; the scaler skips, halves, steps and grows exactly as the CPU twin running
// the same computation (F32 rounded through F16 after every op), plus an injected NaN. Also the CUDA entries against their CPU
// twins on a longer buffer with several ranges and non-finite values inside and outside them, and
// (emulator) the device-to-host copies of scaled_optimizer_step: the norm, plus found_inf when
// the scaler is enabled.
// Label gpu: skips without a device (fails with Y9_REQUIRE_GPU=1); the emulator build runs it in
// both thread orders.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "apps/training/ema.h"
#include "apps/training/grad_scaler.h"
#include "apps/training/optim.h"
#include "apps/training/param_store.h"
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/cuda_runtime.h"
#include "kernels/common/amp.h"
#include "ops/ops.h"
#include "ops/reduce.h"
#include "tests/testutil.h"

#if defined(Y9_CUDA_EMULATOR)
#include "cuda_emu/device.h"
#endif

namespace {

using engine::Device;
using engine::DType;
using engine::Tensor;

std::vector<float> rand_vec(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

constexpr int64_t kN = 64;
constexpr int kSteps = 9;

struct Trace {
  std::vector<double> scales;
  std::vector<int64_t> trackers;
  std::vector<bool> stepped;
  std::vector<float> params, momentum, ema;
  int64_t ema_updates = 0;
  int64_t skipped = 0;
  std::vector<float> first_finite_grads;  // unscaled F32 master gradients of the first finite step
};

/// The FP16 scenario on `dev`: w, b (F32 masters, 64 each), constants x and c;
///   y = half(x) * half(w) + half(b),  z = y * half(c)   (F16),   loss = mean(float(z)).
/// On cuda:0 the forward and backward run in F16 tensors. The CPU backend has no F16 arithmetic,
/// so its twin computes in F32 and rounds through F16 after every op (t.to(F16).to(F32)), which
/// rounds every forward value and every gradient where the F16 graph does: the same numbers.
/// c[5] = 64 and x[5] = 4 make the F16 gradients overflow: d/dz = scale / 64 (1024 at 2^16),
/// d/dy = 64 * that (65536 at 2^16: inf), d/dw5 = 4 * d/dy (inf at 2^15 and 2^14), so the
/// scaler skips three steps (scale 8192), steps three times (growth_interval 3: the scale grows
/// to 16384), overflows again (skip, 8192), skips step 7 on a NaN injected into b's master
/// gradient (4096) and steps at step 8.
Trace run_scenario(Device dev) {
  const bool twin = dev.is_cpu();
  std::vector<float> w0 = rand_vec(kN, 1), b0 = rand_vec(kN, 2, -0.1f, 0.1f), xv = rand_vec(kN, 3),
                     cv = rand_vec(kN, 4);
  xv[5] = 4.f;
  cv[5] = 64.f;
  Tensor w = Tensor::from_vector<float>(w0, {kN}).to(dev);
  Tensor b = Tensor::from_vector<float>(b0, {kN}).to(dev);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  training::ParamStore store({{"w", w}, {"b", b}});
  training::SGD opt(store);
  training::ParamGroup g;
  g.params = store.named_params();
  g.lr = 0.01;
  g.momentum = 0.937;
  g.nesterov = true;
  g.weight_decay = 5e-4;
  opt.add_param_group(g);
  training::ModelEMA ema({store.params()}, store.named_params());
  training::GradScalerOptions o;
  o.growth_interval = 3;
  training::GradScaler scaler(dev, o);
  // half(t) and the rounding of an op's result: real F16 tensors on the device, F32 rounded
  // through F16 on the CPU twin.
  auto half = [&](const Tensor& t) { return twin ? t.to(DType::F16).to(DType::F32) : t.to(DType::F16); };
  auto rounded = [&](const Tensor& t) { return twin ? t.to(DType::F16).to(DType::F32) : t; };
  const Tensor x16 = half(Tensor::from_vector<float>(xv, {kN}).to(dev));
  const Tensor c16 = half(Tensor::from_vector<float>(cv, {kN}).to(dev));

  Trace t;
  for (int step = 0; step < kSteps; ++step) {
    const Tensor w16 = half(store.param(0)), b16 = half(store.param(1));
    const Tensor y = rounded(ops::add(rounded(ops::mul(x16, w16)), b16));
    const Tensor z = rounded(ops::mul(y, c16));
    EXPECT_EQ(z.dtype(), twin ? DType::F32 : DType::F16);
    const Tensor loss = ops::mean(z.to(DType::F32));
    scaler.scale(loss).backward();
    if (step == 7) {  // inject a NaN into one master gradient
      engine::autograd::NoGradGuard ng;
      Tensor(store.grad_segment(1)).slice(0, 9, 10).fill_(std::numeric_limits<double>::quiet_NaN());
    }
    if (step == 3) {
      // The first finite step: the unscaled master gradients (before any clipping).
      scaler.unscale(store);
      t.first_finite_grads = store.grads().flat.to(Device::cpu()).to_vector<float>();
    }
    const bool stepped = scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    ema.update();
    t.scales.push_back(scaler.get_scale());
    t.trackers.push_back(scaler.growth_tracker());
    t.stepped.push_back(stepped);
  }
  t.params = store.params().flat.to(Device::cpu()).to_vector<float>();
  t.momentum = opt.state("w", "momentum_buffer").to(Device::cpu()).to_vector<float>();
  for (const auto& [name, e] : ema.state()) {
    auto v = e.to(Device::cpu()).to_vector<float>();
    t.ema.insert(t.ema.end(), v.begin(), v.end());
  }
  t.ema_updates = ema.updates();
  t.skipped = scaler.skipped_steps();
  return t;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-6 * std::fabs(want[i])) << what << " element " << i;
}

TEST(GradScalerCuda, Fp16StepsSkipHalveAndGrowLikeTheCpuTwin) {
  Y9_SKIP_WITHOUT_GPU();
  const Trace gpu = run_scenario(Device::cuda(0));
  const std::vector<double> want_scale = {32768, 16384, 8192, 8192, 8192, 16384, 8192, 4096, 4096};
  const std::vector<int64_t> want_tracker = {0, 0, 0, 1, 2, 0, 0, 0, 1};
  const std::vector<bool> want_stepped = {false, false, false, true, true, true, false, false, true};
  EXPECT_EQ(gpu.scales, want_scale);
  EXPECT_EQ(gpu.trackers, want_tracker);
  EXPECT_EQ(gpu.stepped, want_stepped);
  EXPECT_EQ(gpu.skipped, 5);
  EXPECT_EQ(gpu.ema_updates, kSteps) << "the EMA updates on skipped steps too";
  // Step 3's unscaled gradient of w[5]: d mean(x*w*c)/dw5 = x5 * c5 / 64 = 4, exact in F16 at
  // scale 8192 (32768 before unscaling).
  ASSERT_FALSE(gpu.first_finite_grads.empty());
  EXPECT_EQ(gpu.first_finite_grads[5], 4.f);
  for (float v : gpu.first_finite_grads) EXPECT_TRUE(std::isfinite(v));

  // The same computation on the CPU twin: the same skips and scales, the same gradients.
  const Trace cpu = run_scenario(Device::cpu());
  EXPECT_EQ(cpu.scales, gpu.scales);
  EXPECT_EQ(cpu.trackers, gpu.trackers);
  EXPECT_EQ(cpu.stepped, gpu.stepped);
  EXPECT_EQ(cpu.ema_updates, gpu.ema_updates);
  EXPECT_EQ(cpu.first_finite_grads, gpu.first_finite_grads);
  expect_close(gpu.params, cpu.params, "parameters");
  expect_close(gpu.momentum, cpu.momentum, "momentum");
  expect_close(gpu.ema, cpu.ema, "ema");
}

#if defined(Y9_CUDA_EMULATOR)
// scaled_optimizer_step on cuda:0 reads the device once per step with the scaler disabled (the
// clipping norm, after the optimizer step and the EMA update are queued) and twice with it enabled
// (found_inf in step(), then the norm); the norm, the clipped step and the EMA equal the CPU's.
TEST(GradScalerCuda, ScaledStepReadsOnlyTheNormAndFoundInf) {
  Y9_SKIP_WITHOUT_GPU();
  struct Out {
    double norm = 0;
    bool stepped = false;
    std::vector<float> params, ema;
    uint64_t d2h = 0;
  };
  auto run = [](Device dev, bool enabled) {
    Tensor w = Tensor::from_vector<float>(rand_vec(kN, 11), {kN}).to(dev);
    Tensor b = Tensor::from_vector<float>(rand_vec(kN, 12), {kN}).to(dev);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    training::ParamStore store({{"w", w}, {"b", b}});
    training::SGD opt(store);
    training::ParamGroup g;
    g.params = store.named_params();
    g.lr = 0.01;
    g.momentum = 0.937;
    g.nesterov = true;
    opt.add_param_group(g);
    training::ModelEMA ema({store.params()}, store.named_params());
    training::GradScalerOptions o;
    o.enabled = enabled;
    o.init_scale = 4.0;
    training::GradScaler scaler(dev, o);
    {
      engine::autograd::NoGradGuard ng;
      // Gradients as a backward at scale 4 would leave them: norm 4 * |g| well above max_norm 1.
      store.grad_segment(0).copy_(Tensor::from_vector<float>(rand_vec(kN, 13, -8.f, 8.f), {kN}).to(dev));
      store.grad_segment(1).copy_(Tensor::from_vector<float>(rand_vec(kN, 14, -8.f, 8.f), {kN}).to(dev));
    }
    const uint64_t before = dev.is_cuda() ? cuda_emu::device_to_host_copies() : 0;
    const training::ScaledStepResult r = training::scaled_optimizer_step(scaler, opt, ema, 1.0);
    Out out;
    out.d2h = dev.is_cuda() ? cuda_emu::device_to_host_copies() - before : 0;
    out.norm = r.grad_norm;
    out.stepped = r.stepped;
    out.params = store.params().flat.to(Device::cpu()).to_vector<float>();
    for (const auto& [name, e] : ema.state()) {
      auto v = e.to(Device::cpu()).to_vector<float>();
      out.ema.insert(out.ema.end(), v.begin(), v.end());
    }
    return out;
  };
  for (bool enabled : {false, true}) {
    SCOPED_TRACE(enabled ? "scaler enabled" : "scaler disabled");
    const Out gpu = run(Device::cuda(0), enabled), cpu = run(Device::cpu(), enabled);
    EXPECT_EQ(gpu.d2h, enabled ? 2u : 1u) << "device-to-host copies in scaled_optimizer_step";
    EXPECT_TRUE(gpu.stepped);
    EXPECT_GT(gpu.norm, 1.0);
    EXPECT_EQ(gpu.norm, cpu.norm);
    expect_close(gpu.params, cpu.params, "parameters");
    expect_close(gpu.ema, cpu.ema, "ema");
  }
}
#endif

// The entries against the CPU twins: several ranges (one empty) over a buffer longer than one
// block, an inf inside a range, a NaN and an inf in the gaps (not checked), and the update of the
// scale for every (found_inf, tracker) case.
TEST(GradScalerCuda, EntriesMatchTheCpuTwins) {
  Y9_SKIP_WITHOUT_GPU();
  const int64_t n = 3000;
  const std::vector<kernels::FlatRange> rg = {{3, 700}, {703, 0}, {720, 1500}, {2300, 650}};
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    std::vector<float> h = rand_vec(static_cast<size_t>(n), 10 + variant, -60000.f, 60000.f);
    h[710] = std::numeric_limits<float>::quiet_NaN();  // gap
    h[2990] = std::numeric_limits<float>::infinity();  // gap
    if (variant == 1) h[1000] = -std::numeric_limits<float>::infinity();
    if (variant == 2) h[2949] = std::numeric_limits<float>::quiet_NaN();  // last element of the last range
    std::vector<float> ref = h;
    float inv = 1.f / 1024.f, found_cpu = 0.f;
    auto kc = engine::kernel(kernels::kAmpUnscale, DType::F32, Device::cpu());
    kc.fn(kc.ctx, ref.data(), rg.data(), static_cast<int64_t>(rg.size()), &inv, &found_cpu);
    EXPECT_EQ(found_cpu, variant == 0 ? 0.f : 1.f);

    Tensor g = Tensor::from_vector<float>(h, {n}).to(Device::cuda(0));
    Tensor dinv = Tensor::full({1}, 1.0 / 1024.0, DType::F32, Device::cuda(0));
    Tensor found = Tensor::zeros({1}, DType::F32, Device::cuda(0));
    auto kg = engine::kernel(kernels::kAmpUnscale, DType::F32, Device::cuda(0));
    kg.fn(kg.ctx, g.data<float>(), rg.data(), static_cast<int64_t>(rg.size()), dinv.data<float>(), found.data<float>());
    EXPECT_EQ(found.item<float>(), found_cpu);
    const std::vector<float> got = g.to(Device::cpu()).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(ref[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
      } else {
        EXPECT_EQ(got[i], ref[i]) << i;
      }
    }
  }
  // amp_update_scale: back-off, growth at the interval, plain count, growth to inf refused.
  struct Case {
    float scale, found;
    int32_t tracker;
  };
  for (const Case& c : {Case{65536.f, 1.f, 5}, Case{65536.f, 0.f, 1}, Case{65536.f, 0.f, 0}, Case{3e38f, 0.f, 1}}) {
    float s_cpu = c.scale;
    int32_t t_cpu = c.tracker;
    auto kc = engine::kernel(kernels::kAmpUpdateScale, DType::F32, Device::cpu());
    kc.fn(kc.ctx, &s_cpu, &t_cpu, &c.found, 2.0, 0.5, 2);
    Tensor s = Tensor::full({1}, c.scale, DType::F32, Device::cuda(0));
    Tensor t = Tensor::from_vector<int32_t>({c.tracker}, {1}).to(Device::cuda(0));
    Tensor f = Tensor::full({1}, c.found, DType::F32, Device::cuda(0));
    auto kg = engine::kernel(kernels::kAmpUpdateScale, DType::F32, Device::cuda(0));
    kg.fn(kg.ctx, s.data<float>(), t.data<int32_t>(), f.data<float>(), 2.0, 0.5, 2);
    EXPECT_EQ(s.item<float>(), s_cpu);
    EXPECT_EQ(t.item<int32_t>(), t_cpu);
  }
}

}  // namespace
