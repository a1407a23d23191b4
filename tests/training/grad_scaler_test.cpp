// GradScaler (apps/training/grad_scaler.h; PyTorch torch/cuda/amp/grad_scaler.py semantics) on
// the CPU: unscale multiplies by exactly float(1/double(scale)); an inf or NaN gradient skips the
// optimizer step (parameters, optimizer state and step counts unchanged) while the EMA still
// updates, halves the scale and resets the growth tracker; growth_interval finite steps double
// the scale; a disabled scaler is a pass-through (the unscaled path bit for bit); misuse errors
// and state_dict round trip. The kernel entries themselves: tests/ops/backend_ops_test.cpp and
// (CUDA, FP16 gradients) tests/training/grad_scaler_cuda_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "apps/training/clip.h"
#include "apps/training/ema.h"
#include "apps/training/grad_scaler.h"
#include "apps/training/optim.h"
#include "apps/training/param_store.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "ops/ops.h"
#include "ops/reduce.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using engine::Tensor;
using training::GradScaler;
using training::GradScalerOptions;
using training::ModelEMA;
using training::NamedTensors;
using training::ParamStore;

std::vector<float> rand_vec(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Two parameters (bias 5, weight 40) in a ParamStore, an SGD (momentum 0.937, nesterov, weight
/// decay on the weight) over them, and the EMA of the store's parameter buffer.
struct Fixture {
  NamedTensors params;
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<training::SGD> opt;
  std::unique_ptr<ModelEMA> ema;

  Fixture() {
    auto mk = [](size_t n, uint64_t seed) {
      Tensor t = Tensor::from_vector<float>(rand_vec(n, seed), {static_cast<int64_t>(n)});
      t.set_requires_grad(true);
      return t;
    };
    params = {{"m.bias", mk(5, 1)}, {"m.weight", mk(40, 2)}};
    store = std::make_unique<ParamStore>(params);
    opt = std::make_unique<training::SGD>(*store);
    training::ParamGroup g0, g1;
    g0.params = {store->named_params()[0]};
    g0.lr = 0.01;
    g0.momentum = 0.937;
    g0.nesterov = true;
    g1.params = {store->named_params()[1]};
    g1.lr = 0.01;
    g1.momentum = 0.937;
    g1.nesterov = true;
    g1.weight_decay = 5e-4;
    opt->add_param_group(g0);
    opt->add_param_group(g1);
    ema = std::make_unique<ModelEMA>(std::vector<engine::FlatBuffer>{store->params()}, store->named_params());
  }
  /// Sets the gradients to `g` (flat over both parameters, in order) times `mul`.
  void set_grads(const std::vector<float>& g, float mul) {
    size_t k = 0;
    for (size_t i = 0; i < store->size(); ++i) {
      const int64_t n = store->param(i).numel();
      std::vector<float> v(g.begin() + static_cast<long>(k), g.begin() + static_cast<long>(k + n));
      for (float& x : v) x *= mul;
      Tensor(store->grad_segment(i)).copy_(Tensor::from_vector<float>(v, {n}));
      k += static_cast<size_t>(n);
    }
  }
  std::vector<float> grads() const {
    std::vector<float> out;
    for (size_t i = 0; i < store->size(); ++i) {
      auto v = store->grad_segment(i).contiguous().to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  std::vector<float> values() const {
    std::vector<float> out;
    for (size_t i = 0; i < store->size(); ++i) {
      auto v = store->param(i).contiguous().to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  std::vector<float> momentum() const {
    std::vector<float> out;
    for (const auto& [name, t] : params) {
      Tensor b = opt->state(name, "momentum_buffer");
      if (!b.defined()) continue;
      auto v = b.contiguous().to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  std::vector<float> ema_values() const {
    std::vector<float> out;
    for (const auto& [name, t] : ema->state()) {
      auto v = t.contiguous().to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

constexpr double kMaxNorm = 10.0;

TEST(GradScaler, DefaultsArePyTorchs) {
  const GradScalerOptions o;
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.growth_factor, 2.0);
  EXPECT_EQ(o.backoff_factor, 0.5);
  EXPECT_EQ(o.growth_interval, 2000);
  GradScaler s(engine::Device::cpu());
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_THROW(GradScaler(engine::Device::cpu(), GradScalerOptions{65536.0, 1.0, 0.5, 2000, true}),
               engine::ConfigError);
  EXPECT_THROW(GradScaler(engine::Device::cpu(), GradScalerOptions{65536.0, 2.0, 1.0, 2000, true}),
               engine::ConfigError);
  EXPECT_THROW(GradScaler(engine::Device::cpu(), GradScalerOptions{65536.0, 2.0, 0.5, 0, true}), engine::ConfigError);
}

TEST(GradScaler, ScaleMultipliesTheLossAndItsGradients) {
  GradScaler s(engine::Device::cpu());
  Tensor x = Tensor::from_vector<float>({1.f, -2.f, 3.f}, {3});
  x.set_requires_grad(true);
  Tensor loss = ops::sum(ops::mul(x, x));
  Tensor scaled = s.scale(loss);
  EXPECT_EQ(scaled.dtype(), DType::F32);
  EXPECT_EQ(scaled.item<float>(), 14.f * 65536.f);
  scaled.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2.f * 65536.f, -4.f * 65536.f, 6.f * 65536.f}));
}

TEST(GradScaler, UnscaleMultipliesByExactlyTheInverseScale) {
  for (double init : {65536.0, 3.0, 0.7}) {
    SCOPED_TRACE(init);
    Fixture st;
    const std::vector<float> g = rand_vec(45, 7, -100.f, 100.f);
    st.set_grads(g, 1.f);
    GradScalerOptions o;
    o.init_scale = init;
    GradScaler s(engine::Device::cpu(), o);
    s.unscale(*st.store);
    const float inv = static_cast<float>(1.0 / static_cast<double>(static_cast<float>(init)));
    const std::vector<float> got = st.grads();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(got[i], g[i] * inv) << i;
    // Power-of-two scale: scaled then unscaled is the gradient itself.
  }
  Fixture st;
  const std::vector<float> g = rand_vec(45, 8);
  st.set_grads(g, 65536.f);
  GradScaler s(engine::Device::cpu());
  s.unscale(*st.store);
  EXPECT_TRUE(same_bits(st.grads(), g));
}

// One finite step under the scaler equals the unscaled step bit for bit (grads scaled by 2^16).
TEST(GradScaler, FiniteStepEqualsTheUnscaledStep) {
  Fixture a, b;
  const std::vector<float> g = rand_vec(45, 9);
  a.set_grads(g, 65536.f);
  b.set_grads(g, 1.f);
  GradScaler s(engine::Device::cpu());
  GradScaler off(engine::Device::cpu(), GradScalerOptions{65536.0, 2.0, 0.5, 2000, false});
  const auto ra = training::scaled_optimizer_step(s, *a.opt, *a.ema, kMaxNorm);
  const auto rb = training::scaled_optimizer_step(off, *b.opt, *b.ema, kMaxNorm);
  EXPECT_TRUE(ra.stepped);
  EXPECT_TRUE(rb.stepped);
  EXPECT_EQ(ra.grad_norm, rb.grad_norm);
  EXPECT_TRUE(same_bits(a.values(), b.values()));
  EXPECT_TRUE(same_bits(a.momentum(), b.momentum()));
  EXPECT_TRUE(same_bits(a.ema_values(), b.ema_values()));
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 1);
  EXPECT_EQ(s.skipped_steps(), 0);
}

// An inf or a NaN in one gradient: no step, scale halves, growth tracker resets, EMA updates.
TEST(GradScaler, NonFiniteGradientSkipsTheStepAndHalvesTheScale) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    Fixture st;
    GradScaler s(engine::Device::cpu());
    // A first finite step: momentum state exists, the growth tracker is 1.
    st.set_grads(rand_vec(45, 10), 65536.f);
    ASSERT_TRUE(training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm).stepped);
    ASSERT_EQ(s.growth_tracker(), 1);
    const auto p0 = st.values(), m0 = st.momentum(), e0 = st.ema_values();
    const int64_t steps0 = st.opt->state_step("m.weight"), upd0 = st.ema->updates();
    // Move the EMA away from the model so that its update is visible in the values.
    {
      engine::autograd::NoGradGuard ng;
      for (const auto& [name, t] : st.ema->state()) Tensor(t).mul_(0.5);
    }
    const auto e_half = st.ema_values();
    std::vector<float> g = rand_vec(45, 11);
    g[17] = bad;  // in the weight
    st.set_grads(g, 65536.f);
    const auto r = training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm);
    EXPECT_FALSE(r.stepped);
    EXPECT_TRUE(s.last_step_skipped());
    EXPECT_FALSE(std::isfinite(r.grad_norm));
    EXPECT_TRUE(same_bits(st.values(), p0)) << "parameters changed on a skipped step";
    EXPECT_TRUE(same_bits(st.momentum(), m0)) << "optimizer state changed on a skipped step";
    EXPECT_EQ(st.opt->state_step("m.weight"), steps0);
    EXPECT_EQ(st.ema->updates(), upd0 + 1) << "the EMA must update on a skipped step";
    EXPECT_FALSE(same_bits(st.ema_values(), e_half));
    (void)e0;
    EXPECT_EQ(s.get_scale(), 32768.0);
    EXPECT_EQ(s.growth_tracker(), 0);
    EXPECT_EQ(s.skipped_steps(), 1);
    for (float v : st.grads()) EXPECT_EQ(v, 0.f) << "zero_grad after a skipped step";
    // The next finite step steps at the halved scale.
    st.set_grads(rand_vec(45, 12), 32768.f);
    EXPECT_TRUE(training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm).stepped);
    EXPECT_FALSE(s.last_step_skipped());
    EXPECT_EQ(s.get_scale(), 32768.0);
    EXPECT_EQ(s.growth_tracker(), 1);
  }
}

TEST(GradScaler, GrowthIntervalFiniteStepsDoubleTheScale) {
  Fixture st;
  GradScalerOptions o;
  o.growth_interval = 3;
  GradScaler s(engine::Device::cpu(), o);
  const int64_t want_tracker[] = {1, 2, 0, 1, 2, 0};
  const double want_scale[] = {65536.0, 65536.0, 131072.0, 131072.0, 131072.0, 262144.0};
  for (int k = 0; k < 6; ++k) {
    SCOPED_TRACE(k);
    st.set_grads(rand_vec(45, 20 + k), static_cast<float>(s.get_scale()));
    EXPECT_TRUE(training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm).stepped);
    EXPECT_EQ(s.growth_tracker(), want_tracker[k]);
    EXPECT_EQ(s.get_scale(), want_scale[k]);
  }
  // A skip in the middle of an interval resets the count.
  st.set_grads(rand_vec(45, 30), static_cast<float>(s.get_scale()));
  ASSERT_TRUE(training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm).stepped);
  EXPECT_EQ(s.growth_tracker(), 1);
  std::vector<float> g = rand_vec(45, 31);
  g[0] = std::numeric_limits<float>::quiet_NaN();
  st.set_grads(g, 1.f);
  EXPECT_FALSE(training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm).stepped);
  EXPECT_EQ(s.get_scale(), 131072.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  for (int k = 0; k < 2; ++k) {
    st.set_grads(rand_vec(45, 40 + k), static_cast<float>(s.get_scale()));
    ASSERT_TRUE(training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm).stepped);
  }
  EXPECT_EQ(s.get_scale(), 131072.0);
  st.set_grads(rand_vec(45, 42), static_cast<float>(s.get_scale()));
  ASSERT_TRUE(training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm).stepped);
  EXPECT_EQ(s.get_scale(), 262144.0);
  EXPECT_EQ(s.skipped_steps(), 1);
}

// Growth keeps the scale only when the grown value is finite (torch._amp_update_scale_).
TEST(GradScaler, GrowthToInfinityKeepsTheScale) {
  Fixture st;
  GradScalerOptions o;
  o.init_scale = 3e38;
  o.growth_interval = 1;
  GradScaler s(engine::Device::cpu(), o);
  st.set_grads(rand_vec(45, 50, -1e-30f, 1e-30f), 1.f);
  ASSERT_TRUE(training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm).stepped);
  EXPECT_EQ(s.get_scale(), static_cast<double>(3e38f));
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, DisabledIsAPassThrough) {
  GradScaler s(engine::Device::cpu(), GradScalerOptions{65536.0, 2.0, 0.5, 2000, false});
  EXPECT_FALSE(s.enabled());
  Tensor loss = Tensor::full({}, 2.5);
  Tensor out = s.scale(loss);
  EXPECT_EQ(out.impl(), loss.impl());
  EXPECT_EQ(s.get_scale(), 1.0);
  EXPECT_TRUE(s.state_dict().empty());
  // Even an inf gradient steps (PyTorch's GradScaler(enabled=False) checks nothing).
  Fixture st;
  std::vector<float> g = rand_vec(45, 60);
  g[3] = std::numeric_limits<float>::infinity();
  st.set_grads(g, 1.f);
  const auto p0 = st.values();
  EXPECT_TRUE(training::scaled_optimizer_step(s, *st.opt, *st.ema, kMaxNorm).stepped);
  EXPECT_FALSE(same_bits(st.values(), p0));
}

TEST(GradScaler, MisuseErrorsAndStateDict) {
  Fixture st;
  GradScaler s(engine::Device::cpu());
  EXPECT_THROW(s.update(), engine::Error);  // no inf checks recorded
  s.unscale(*st.store);
  EXPECT_THROW(s.unscale(*st.store), engine::Error);
  EXPECT_TRUE(s.step(*st.opt));
  EXPECT_THROW(s.step(*st.opt), engine::Error);
  s.update();
  // step() without unscale() unscales itself.
  st.set_grads(rand_vec(45, 70), 65536.f);
  EXPECT_TRUE(s.step(*st.opt));
  s.update();
  EXPECT_EQ(s.growth_tracker(), 2);
  const auto sd = s.state_dict();
  ASSERT_EQ(sd.size(), 5u);
  EXPECT_EQ(sd.at("scale").item<double>(), 65536.0);
  EXPECT_EQ(sd.at("_growth_tracker").item<double>(), 2.0);
  EXPECT_EQ(sd.at("growth_interval").item<double>(), 2000.0);
  GradScalerOptions o;
  o.init_scale = 8.0;
  GradScaler t(engine::Device::cpu(), o);
  t.load_state_dict(sd);
  EXPECT_EQ(t.get_scale(), 65536.0);
  EXPECT_EQ(t.growth_tracker(), 2);
  EXPECT_THROW(t.load_state_dict({}), engine::Error);
}

TEST(GradScaler, AmpModeIsCudaOnlyButCpuBf16) {
  using training::AmpMode;
  using training::resolve_amp_mode;
  std::string why;
  EXPECT_EQ(resolve_amp_mode("auto", true, &why), AmpMode::FP16);  // official: on for CUDA
  EXPECT_TRUE(why.empty());
  EXPECT_EQ(resolve_amp_mode("auto", false, &why), AmpMode::Off);  // and off on the CPU, silently
  EXPECT_TRUE(why.empty());
  EXPECT_EQ(resolve_amp_mode("bf16", true, &why), AmpMode::BF16);
  EXPECT_EQ(resolve_amp_mode("off", true, &why), AmpMode::Off);
  EXPECT_EQ(resolve_amp_mode("fp16", false, &why), AmpMode::Off);  // forced on the CPU: a notice
  EXPECT_NE(why.find("CUDA-only"), std::string::npos) << why;
  EXPECT_EQ(resolve_amp_mode("bf16", false, &why), AmpMode::Off);  // a CPU without native BF16
  EXPECT_NE(why.find("no native BF16"), std::string::npos) << why;
  // With native BF16 the CPU takes --amp bf16 (BF16 convolutions), and only that mode.
  EXPECT_EQ(resolve_amp_mode("bf16", false, &why, /*cpu_bf16=*/true), AmpMode::BF16);
  EXPECT_NE(why.find("convolutions in BF16"), std::string::npos) << why;
  EXPECT_EQ(resolve_amp_mode("fp16", false, &why, true), AmpMode::Off);
  EXPECT_NE(why.find("CUDA-only"), std::string::npos) << why;
  EXPECT_NE(why.find("--amp bf16"), std::string::npos) << why;  // points to what this CPU can do
  EXPECT_EQ(resolve_amp_mode("auto", false, &why, true), AmpMode::Off);
  EXPECT_TRUE(why.empty());
  EXPECT_THROW(resolve_amp_mode("fp8", true, &why), engine::ConfigError);
  EXPECT_STREQ(training::amp_mode_name(AmpMode::FP16), "fp16");
}

}  // namespace
