// Unit tests of the training machinery: optimizers (SGD/nesterov, Adam, AdamW+amsgrad, Lion)
// against hand computation in double, flat parameter/grad buffers, state save/load, LR lambdas and
// the one-epoch lag, warm-up interpolation, EMA decay ramp, clip_grad_norm_, FP16 rounding, freeze.
#include <cmath>
#include <cstdint>
#include <random>

#include <gtest/gtest.h>

#include "apps/training/clip.h"
#include "apps/training/ema.h"
#include "apps/training/optim.h"
#include "apps/training/param_groups.h"
#include "apps/training/param_store.h"
#include "apps/training/schedule.h"
#include "engine/flat_params.h"
#include "tests/testutil.h"

using engine::DType;
using engine::Tensor;
using training::NamedTensors;
using training::ParamStore;

namespace {

std::vector<float> rand_vec(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

Tensor param(const std::vector<float>& v) {
  Tensor t = Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  t.set_requires_grad(true);
  return t;
}

// Writes the gradient of a parameter of a ParamStore (its grad is a view into the flat buffer).
void set_grad(const Tensor& p, const std::vector<float>& g) {
  ASSERT_TRUE(p.grad().defined()) << "not a trainable parameter of a ParamStore";
  Tensor(p.grad()).copy_(Tensor::from_vector<float>(g, p.shape()));
}

// A ParamStore over the parameters of `ps` (in order).
std::unique_ptr<ParamStore> store_of(const NamedTensors& ps) { return std::make_unique<ParamStore>(ps); }

// Relative+absolute closeness of float results to double references.
void expect_near_vec(const std::vector<float>& got, const std::vector<double>& want, double rtol = 2e-6,
                     double atol = 1e-7) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << "element " << i;
}

// Three one-tensor groups with distinct names (bias, decay, norm), their store and an official
// optimizer of `kind` over them.
struct ThreeGroups {
  training::OfficialParamSplit split;
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<training::Optimizer> opt;
  explicit ThreeGroups(training::OptimizerKind kind) {
    split.bias = {{"m.bias", param(rand_vec(2, 91))}};
    split.decay = {{"m.conv.weight", param(rand_vec(2, 92))}};
    split.norm = {{"m.bn.weight", param(rand_vec(2, 93))}};
    store = store_of({split.decay[0], split.norm[0], split.bias[0]});
    opt = training::make_official_optimizer(kind, *store, split, 0.01, 0.937, 5e-4);
  }
};

}  // namespace

// --- SGD ---------------------------------------------------------------------------------------

TEST(SGD, NesterovWithDecayMatchesHandComputation) {
  const size_t n = 37;
  auto p0 = rand_vec(n, 1), g1 = rand_vec(n, 2), g2 = rand_vec(n, 3);
  Tensor p = param(p0);
  auto store = store_of({{"w", p}});
  training::SGD opt(*store);
  training::ParamGroup g;
  g.params = {{"w", p}};
  g.lr = 0.1;
  g.momentum = 0.9;
  g.weight_decay = 0.01;
  g.nesterov = true;
  opt.add_param_group(g);
  // Step 1: buf = d_p; step 2: buf = m*buf + d_p; p -= lr*(d_p + m*buf).
  std::vector<double> pd(p0.begin(), p0.end()), buf(n);
  for (int step = 0; step < 2; ++step) {
    const auto& gr = step == 0 ? g1 : g2;
    set_grad(p, gr);
    opt.step();
    for (size_t i = 0; i < n; ++i) {
      const double dp = gr[i] + 0.01 * pd[i];
      buf[i] = step == 0 ? dp : 0.9 * buf[i] + dp;
      pd[i] -= 0.1 * (dp + 0.9 * buf[i]);
    }
    expect_near_vec(p.to_vector<float>(), pd);
    expect_near_vec(opt.state("w", "momentum_buffer").to_vector<float>(), buf);
  }
  EXPECT_EQ(opt.state_step("w"), 2);
}

// The trainer freezes the flat parameters through an accumulation window (the CPU convolutions
// keep their weight layouts, engine::Storage::freeze); the step writes them through raw pointers,
// so it thaws them itself first: a new DerivedData generation, nothing derived served stale.
TEST(SGD, StepThawsAFrozenStore) {
  Tensor p = param(rand_vec(8, 4));
  auto store = store_of({{"w", p}});
  training::SGD opt(*store);
  training::ParamGroup g;
  g.params = {{"w", p}};
  g.lr = 0.1;
  opt.add_param_group(g);
  set_grad(p, rand_vec(8, 5));
  engine::Storage& st = *store->params().flat.storage();
  st.freeze();
  const uint64_t gen = st.derived()->generation();
  const std::vector<float> before = p.to_vector<float>();
  opt.step();
  EXPECT_FALSE(st.frozen());
  EXPECT_EQ(st.derived(), nullptr);
  EXPECT_NE(p.to_vector<float>(), before);
  st.freeze();
  EXPECT_EQ(st.derived()->generation(), gen + 1);
}

TEST(SGD, PlainMomentumDampeningAndNoMomentum) {
  const size_t n = 9;
  auto p0 = rand_vec(n, 4), g1 = rand_vec(n, 5), g2 = rand_vec(n, 6);
  Tensor a = param(p0), b = param(p0);
  auto store = store_of({{"a", a}, {"b", b}});
  training::SGD opt(*store);
  training::ParamGroup ga;
  ga.params = {{"a", a}};
  ga.lr = 0.05;
  ga.momentum = 0.8;
  ga.dampening = 0.25;
  opt.add_param_group(ga);
  training::ParamGroup gb;
  gb.params = {{"b", b}};
  gb.lr = 0.05;
  gb.momentum = 0.0;
  opt.add_param_group(gb);
  std::vector<double> pa(p0.begin(), p0.end()), pb = pa, buf(n);
  for (int step = 0; step < 2; ++step) {
    const auto& gr = step == 0 ? g1 : g2;
    set_grad(a, gr);
    set_grad(b, gr);
    opt.step();
    for (size_t i = 0; i < n; ++i) {
      buf[i] = step == 0 ? gr[i] : 0.8 * buf[i] + 0.75 * gr[i];  // dampening not applied on the first step
      pa[i] -= 0.05 * buf[i];
      pb[i] -= 0.05 * gr[i];
    }
  }
  expect_near_vec(a.to_vector<float>(), pa);
  expect_near_vec(b.to_vector<float>(), pb);
  EXPECT_FALSE(opt.state("b", "momentum_buffer").defined());
}

TEST(SGD, SkipsParametersWithoutGrad) {
  auto p0 = rand_vec(5, 7);
  Tensor p = param(p0);
  Tensor frozen = Tensor::from_vector<float>(p0, {5});  // requires_grad false, no grad
  auto store = store_of({{"p", p}, {"frozen", frozen}});
  EXPECT_FALSE(frozen.grad().defined());
  training::SGD opt(*store);
  training::ParamGroup g;
  g.params = {{"p", p}, {"frozen", frozen}};
  g.lr = 1.0;
  g.momentum = 0.9;
  g.weight_decay = 0.1;  // would move `frozen` if it were stepped
  opt.add_param_group(g);
  set_grad(p, rand_vec(5, 8));
  opt.step();
  EXPECT_EQ(frozen.to_vector<float>(), p0);
  EXPECT_NE(p.to_vector<float>(), p0);
  EXPECT_EQ(opt.state_step("frozen"), 0);
}

// --- Adam / AdamW / Lion ---------------------------------------------------------------------

namespace {
void run_adam_case(bool decoupled, bool amsgrad, double wd) {
  const size_t n = 23;
  const double lr = 0.01, b1 = 0.937, b2 = 0.999, eps = 1e-8;
  auto p0 = rand_vec(n, 10);
  Tensor p = param(p0);
  auto store = store_of({{"w", p}});
  training::Adam opt(*store, decoupled, b2, eps, amsgrad);
  training::ParamGroup g;
  g.params = {{"w", p}};
  g.lr = lr;
  g.momentum = b1;
  g.weight_decay = wd;
  opt.add_param_group(g);
  std::vector<double> pd(p0.begin(), p0.end()), m(n), v(n), vmax(n);
  for (int t = 1; t <= 3; ++t) {
    auto gr = rand_vec(n, 20 + t, -2.f, 2.f);
    set_grad(p, gr);
    opt.step();
    for (size_t i = 0; i < n; ++i) {
      double gi = gr[i];
      if (decoupled) pd[i] *= 1 - lr * wd;
      else gi += wd * pd[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      vmax[i] = std::max(vmax[i], v[i]);
      const double vv = amsgrad ? vmax[i] : v[i];
      const double denom = std::sqrt(vv) / std::sqrt(1 - std::pow(b2, t)) + eps;
      pd[i] -= lr / (1 - std::pow(b1, t)) * m[i] / denom;
    }
    expect_near_vec(p.to_vector<float>(), pd, 5e-6, 1e-7);
    expect_near_vec(opt.state("w", "exp_avg").to_vector<float>(), m, 5e-6, 1e-8);
  }
}
}  // namespace

TEST(Adam, L2DecayMatchesHandComputation) { run_adam_case(false, false, 0.05); }
TEST(Adam, AdamWAmsgradMatchesHandComputation) { run_adam_case(true, true, 0.05); }
TEST(Adam, AdamWNoDecay) { run_adam_case(true, false, 0.0); }

TEST(Lion, MatchesHandComputation) {
  const size_t n = 19;
  const double lr = 1e-3, b1 = 0.937, b2 = 0.99, wd = 0.1;
  auto p0 = rand_vec(n, 30);
  Tensor p = param(p0);
  auto store = store_of({{"w", p}});
  training::Lion opt(*store, b2);
  training::ParamGroup g;
  g.params = {{"w", p}};
  g.lr = lr;
  g.momentum = b1;
  g.weight_decay = wd;
  opt.add_param_group(g);
  std::vector<double> pd(p0.begin(), p0.end()), m(n);
  for (int t = 1; t <= 3; ++t) {
    auto gr = rand_vec(n, 40 + t);
    set_grad(p, gr);
    opt.step();
    for (size_t i = 0; i < n; ++i) {
      pd[i] *= 1 - lr * wd;
      const double u = b1 * m[i] + (1 - b1) * gr[i];
      pd[i] -= lr * (u > 0 ? 1.0 : (u < 0 ? -1.0 : 0.0));
      m[i] = b2 * m[i] + (1 - b2) * gr[i];
    }
    expect_near_vec(p.to_vector<float>(), pd);
    expect_near_vec(opt.state("w", "exp_avg").to_vector<float>(), m, 5e-6, 1e-8);
  }
}

// --- official construction -------------------------------------------------------------------

TEST(OfficialOptimizer, GroupsOrderBetasAndScaling) {
  NamedTensors ps = {{"model.0.conv.weight", param(rand_vec(8, 1))},
                     {"model.0.bn.weight", param(rand_vec(2, 2))},
                     {"model.0.bn.bias", param(rand_vec(2, 3))},
                     {"model.9.conv.bias", param(rand_vec(2, 4))}};
  auto split = training::split_official_param_groups(
      ps, [](const std::string& n) { return n.find(".bn.weight") != std::string::npos; });
  auto store = store_of(ps);
  ASSERT_EQ(split.bias.size(), 2u);
  ASSERT_EQ(split.decay.size(), 1u);
  ASSERT_EQ(split.norm.size(), 1u);
  EXPECT_EQ(split.decay[0].first, "model.0.conv.weight");
  for (auto kind : {training::OptimizerKind::SGD, training::OptimizerKind::Adam, training::OptimizerKind::AdamW,
                    training::OptimizerKind::Lion}) {
    auto opt = training::make_official_optimizer(kind, *store, split, 0.01, 0.937, 5e-4);
    ASSERT_EQ(opt->param_groups().size(), 3u);
    EXPECT_EQ(opt->param_groups()[0].weight_decay, 0.0);
    EXPECT_EQ(opt->param_groups()[1].weight_decay, 5e-4);
    EXPECT_EQ(opt->param_groups()[2].weight_decay, 0.0);
    EXPECT_EQ(opt->param_groups()[0].nesterov, kind == training::OptimizerKind::SGD);
    EXPECT_EQ(opt->warmup_momentum(), kind == training::OptimizerKind::SGD);
    EXPECT_EQ(opt->kind(), kind);
  }
  EXPECT_EQ(training::parse_optimizer_kind("LION"), training::OptimizerKind::Lion);
  EXPECT_THROW(training::parse_optimizer_kind("RMSProp"), engine::ConfigError);
  // accumulate = max(round_half_even(64 / batch), 1); wd *= batch*accumulate/64.
  EXPECT_EQ(training::official_accumulate(16), 4);
  EXPECT_EQ(training::official_accumulate(128), 1);  // round(0.5) = 0 -> 1
  EXPECT_EQ(training::official_accumulate(24), 3);
  EXPECT_EQ(training::official_accumulate(2), 32);
  EXPECT_EQ(training::official_accumulate(256), 1);
  EXPECT_DOUBLE_EQ(training::official_weight_decay(5e-4, 16, 4), 5e-4);
  EXPECT_DOUBLE_EQ(training::official_weight_decay(5e-4, 128, 1), 1e-3);
  EXPECT_DOUBLE_EQ(training::official_weight_decay(5e-4, 24, 3), 5e-4 * 1.125);
}

// --- flat buffers ----------------------------------------------------------------------------

TEST(FlatParams, OneFusedStepEqualsPerTensorStepsBitwise) {
  // One store with every parameter (one fused call over merged ranges) against one store per
  // parameter (one call per tensor): bitwise equal, padding stays zero, zero_grad keeps the views.
  const std::vector<int64_t> sizes = {3, 64, 65, 1, 130, 7};
  NamedTensors a, b;
  std::vector<std::unique_ptr<ParamStore>> a_stores;
  std::vector<std::vector<float>> grads;
  for (size_t k = 0; k < sizes.size(); ++k) {
    auto v = rand_vec(static_cast<size_t>(sizes[k]), 100 + k);
    a.emplace_back("p" + std::to_string(k), param(v));
    b.emplace_back("p" + std::to_string(k), param(v));
    grads.push_back(rand_vec(static_cast<size_t>(sizes[k]), 200 + k));
  }
  ParamStore store(b);
  const engine::FlatBuffer& fp = store.params();
  const engine::FlatBuffer& fg = store.grads();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(fp.flat.data_ptr()) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(fg.flat.data_ptr()) % 256, 0u);
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b[k].second.data_ptr()) % 256, 0u);
    EXPECT_EQ(b[k].second.storage().get(), fp.flat.storage().get());
    EXPECT_EQ(b[k].second.grad().storage().get(), fg.flat.storage().get());
    EXPECT_EQ(b[k].second.to_vector<float>(), a[k].second.to_vector<float>());  // values preserved
  }
  EXPECT_EQ(store.ranges({0, 1, 2, 3, 4, 5}).size(), 1u);  // adjacent segments merge into one range
  EXPECT_EQ(store.ranges({0, 2, 3}).size(), 2u);
  auto group = [](const NamedTensors& ps) {
    training::ParamGroup g;
    g.params = ps;
    g.lr = 0.01;
    g.momentum = 0.937;
    g.weight_decay = 5e-4;
    g.nesterov = true;
    return g;
  };
  std::vector<std::unique_ptr<training::SGD>> oa;
  for (size_t k = 0; k < sizes.size(); ++k) {
    a_stores.push_back(store_of({a[k]}));
    oa.push_back(std::make_unique<training::SGD>(*a_stores.back()));
    oa.back()->add_param_group(group({a[k]}));
  }
  training::SGD ob(store);
  ob.add_param_group(group(b));
  for (int step = 0; step < 3; ++step) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      set_grad(a[k].second, grads[k]);
      set_grad(b[k].second, grads[k]);
      oa[k]->step();
    }
    ob.step();
    ob.zero_grad();
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_EQ(b[k].second.to_vector<float>(), a[k].second.to_vector<float>()) << k;
    EXPECT_EQ(ob.state(b[k].first, "momentum_buffer").to_vector<float>(),
              oa[k]->state(a[k].first, "momentum_buffer").to_vector<float>())
        << k;
    // zero_grad keeps the flat views attached, and zeroes them
    EXPECT_EQ(b[k].second.grad().storage().get(), fg.flat.storage().get());
    for (float v : b[k].second.grad().to_vector<float>()) EXPECT_EQ(v, 0.f);
  }
  // Padding stays zero after the merged-range updates.
  auto all = fp.flat.to_vector<float>();
  for (size_t k = 0; k + 1 < fp.segments.size(); ++k)
    for (int64_t i = fp.segments[k].offset + fp.segments[k].numel; i < fp.segments[k + 1].offset; ++i)
      EXPECT_EQ(all[static_cast<size_t>(i)], 0.f);
}

TEST(FlatParams, FrozenParametersGetNoGradView) {
  EXPECT_THROW(engine::pack_flat({}), engine::Error);
  // The store keeps a zero gradient segment for frozen parameters but attaches no view.
  NamedTensors qs = {{"a", param(rand_vec(4, 1))}, {"b", Tensor::from_vector<float>(rand_vec(4, 2), {4})}};
  ParamStore store(qs);
  EXPECT_TRUE(store.trainable(0));
  EXPECT_FALSE(store.trainable(1));
  EXPECT_FALSE(qs[1].second.grad().defined());
  EXPECT_EQ(store.grads().segments.size(), 2u);
  EXPECT_THROW(ParamStore({}), engine::Error);
  EXPECT_THROW(ParamStore({qs[0], {"again", qs[0].second}}), engine::Error);
  EXPECT_THROW(store.index_of(param({1})), engine::Error);
}

// --- state save/load -------------------------------------------------------------------------

TEST(OptimizerState, SaveLoadContinuesIdentically) {
  for (auto kind : {training::OptimizerKind::SGD, training::OptimizerKind::AdamW, training::OptimizerKind::Lion}) {
    auto v0 = rand_vec(11, 50), v1 = rand_vec(3, 51);
    NamedTensors a = {{"x.weight", param(v0)}, {"x.bias", param(v1)}};
    NamedTensors b = {{"x.weight", param(v0)}, {"x.bias", param(v1)}};
    auto pred = [](const std::string&) { return false; };
    auto sa = store_of(a), sb = store_of(b);
    auto oa = training::make_official_optimizer(kind, *sa, training::split_official_param_groups(a, pred), 0.01, 0.9,
                                                1e-3);
    auto ob = training::make_official_optimizer(kind, *sb, training::split_official_param_groups(b, pred), 0.5, 0.1,
                                                0.0);
    for (int s = 0; s < 2; ++s) {
      set_grad(a[0].second, rand_vec(11, 60 + s));
      set_grad(a[1].second, rand_vec(3, 70 + s));
      oa->step();
    }
    // b: same parameter values as a now, then load a's state.
    b[0].second.detach().copy_(a[0].second);
    b[1].second.detach().copy_(a[1].second);
    ob->load_state_dict(oa->state_dict());
    EXPECT_EQ(ob->param_groups()[1].lr, 0.01);
    EXPECT_EQ(ob->param_groups()[1].weight_decay, 1e-3);
    EXPECT_EQ(ob->state_step("x.weight"), 2);
    for (auto* p : {&a, &b}) {
      set_grad((*p)[0].second, rand_vec(11, 80));
      set_grad((*p)[1].second, rand_vec(3, 81));
    }
    oa->step();
    ob->step();
    EXPECT_EQ(a[0].second.to_vector<float>(), b[0].second.to_vector<float>()) << training::optimizer_kind_name(kind);
    EXPECT_EQ(a[1].second.to_vector<float>(), b[1].second.to_vector<float>()) << training::optimizer_kind_name(kind);
  }
}

// --- schedules -------------------------------------------------------------------------------

TEST(Schedule, LambdasMatchClosedForms) {
  const double lrf = 0.01, pi = std::acos(-1.0);
  const int64_t E = 100;
  auto lin = training::make_lr_lambda(training::LrScheduleKind::Linear, lrf, E);
  auto cos = training::make_lr_lambda(training::LrScheduleKind::Cosine, lrf, E);
  auto flat = training::make_lr_lambda(training::LrScheduleKind::FlatCosine, lrf, E);
  auto fixed = training::make_lr_lambda(training::LrScheduleKind::Fixed, lrf, E);
  for (int64_t e : {0, 1, 37, 50, 51, 99, 100}) {
    EXPECT_NEAR(lin(e), 1.0 - (1.0 - lrf) * e / E, 1e-15) << e;
    EXPECT_NEAR(cos(e), lrf + (1 - lrf) * 0.5 * (1 + std::cos(pi * e / E)), 1e-15) << e;
    const double fl = e <= 50 ? 1.0 : lrf + (1 - lrf) * 0.5 * (1 + std::cos(pi * (e - 50) / 50.0));
    EXPECT_NEAR(flat(e), fl, 1e-15) << e;
    EXPECT_EQ(fixed(e), 1.0);
  }
  EXPECT_EQ(lin(0), 1.0);
  EXPECT_NEAR(lin(99), 0.01 + 0.99 / 100, 1e-15);  // last epoch's factor, spec 4.1
  EXPECT_NEAR(cos(100), lrf, 1e-15);
  auto flat1 = training::make_lr_lambda(training::LrScheduleKind::FlatCosine, lrf, 1);
  EXPECT_EQ(flat1(0), 1.0);
  EXPECT_THROW(flat1(1), engine::ConfigError);
  EXPECT_THROW(training::make_lr_lambda(training::LrScheduleKind::Linear, lrf, 0), engine::ConfigError);
}

TEST(Schedule, OneEpochLagAsOfficial) {
  ThreeGroups tg(training::OptimizerKind::SGD);
  auto& opt = tg.opt;
  const int64_t E = 10;
  auto lf = training::make_lr_lambda(training::LrScheduleKind::Linear, 0.01, E);
  training::LambdaLR sched(*opt, lf);
  EXPECT_DOUBLE_EQ(opt->param_groups()[1].lr, 0.01 * lf(0));  // set at construction
  sched.set_last_epoch(-1);                                   // start_epoch - 1
  for (int64_t epoch = 0; epoch < E; ++epoch) {
    // lr in force during epoch `epoch` (no warm-up): lf(0) for epoch 0, lf(epoch-1) afterwards.
    const double expect = 0.01 * lf(epoch == 0 ? 0 : epoch - 1);
    for (const auto& g : opt->param_groups()) EXPECT_DOUBLE_EQ(g.lr, expect) << "epoch " << epoch;
    sched.step();  // at epoch end
    EXPECT_EQ(sched.last_epoch(), epoch);
  }
}

TEST(Schedule, WarmupInterpolation) {
  EXPECT_EQ(training::warmup_iterations(3.0, 7393), 22179);
  EXPECT_EQ(training::warmup_iterations(3.0, 8), 100);
  EXPECT_EQ(training::warmup_iterations(0.5, 201), 100);
  EXPECT_EQ(training::warmup_iterations(2.5, 41), 102);   // 102.5 -> 102 (half to even)
  EXPECT_EQ(training::warmup_iterations(2.5, 43), 108);   // 107.5 -> 108
  EXPECT_EQ(training::np_interp(0, 0, 192, 0.1, 0.01), 0.1);
  EXPECT_EQ(training::np_interp(192, 0, 192, 0.1, 0.01), 0.01);
  EXPECT_EQ(training::np_interp(500, 0, 192, 0.1, 0.01), 0.01);
  EXPECT_EQ(training::np_interp(96, 0, 192, 0.1, 0.01), (0.01 - 0.1) / 192.0 * 96.0 + 0.1);

  ThreeGroups tg(training::OptimizerKind::SGD);
  auto& sgd = tg.opt;
  training::WarmupHyp hyp;  // 3.0, 0.8, 0.1, 0.937, nbs 64
  const int64_t nw = 300, batch = 16;
  const double lf_e = 0.9;
  for (int64_t ni : {0, 1, 75, 150, 299, 300}) {
    const int64_t acc = training::apply_warmup(*sgd, ni, nw, lf_e, hyp, batch);
    const double t = static_cast<double>(ni) / nw;
    EXPECT_EQ(acc, std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(1 + 3.0 * t)))) << ni;
    const auto& g = sgd->param_groups();
    EXPECT_NEAR(g[0].lr, 0.1 + (0.01 * lf_e - 0.1) * t, 1e-15) << ni;
    EXPECT_NEAR(g[1].lr, 0.01 * lf_e * t, 1e-15) << ni;
    EXPECT_NEAR(g[2].lr, 0.01 * lf_e * t, 1e-15) << ni;
    for (const auto& gg : g) EXPECT_NEAR(gg.momentum, 0.8 + (0.937 - 0.8) * t, 1e-15) << ni;
  }
  // Adam groups have no 'momentum' entry officially (betas): warm-up leaves beta1 alone.
  ThreeGroups ta(training::OptimizerKind::Adam);
  auto& adam = ta.opt;
  training::apply_warmup(*adam, 0, nw, 1.0, hyp, batch);
  EXPECT_EQ(adam->param_groups()[0].momentum, 0.937);
  EXPECT_EQ(adam->param_groups()[0].lr, 0.1);
  EXPECT_EQ(adam->param_groups()[1].lr, 0.0);
  // half-to-even on accumulate: batch 16, interp = 2.5 at ni = nw/2 -> 2
  EXPECT_EQ(training::apply_warmup(*sgd, 150, 300, 1.0, hyp, 16), 2);
}

// --- EMA -------------------------------------------------------------------------------------

TEST(ModelEMA, DecayRampAndBlend) {
  auto w0 = rand_vec(6, 1), v0 = rand_vec(3, 2);
  Tensor w = Tensor::from_vector<float>(w0, {2, 3});
  Tensor v = Tensor::from_vector<float>(v0, {3});
  Tensor nbt = Tensor::from_vector<int64_t>({5}, {});
  const engine::FlatBuffer f1 = engine::pack_flat({{"w", w}}), f2 = engine::pack_flat({{"v", v}});
  NamedTensors model = {{"w", w}, {"bn.num_batches_tracked", nbt}, {"v", v}};
  training::ModelEMA ema({f1, f2}, model);
  EXPECT_EQ(ema.updates(), 0);
  EXPECT_DOUBLE_EQ(ema.decay_at(1), 0.9999 * (1 - std::exp(-1.0 / 2000)));
  EXPECT_NEAR(ema.decay_at(2000), 0.9999 * (1 - std::exp(-1.0)), 1e-15);
  EXPECT_NEAR(ema.decay_at(100000), 0.9999, 1e-12);
  ASSERT_EQ(ema.state().size(), 3u);  // model order
  EXPECT_EQ(ema.state()[1].first, "bn.num_batches_tracked");
  std::vector<double> e(w0.begin(), w0.end()), ev(v0.begin(), v0.end());
  for (int u = 1; u <= 3; ++u) {
    auto wn = rand_vec(6, 10 + u), vn = rand_vec(3, 20 + u);
    w.detach().copy_(Tensor::from_vector<float>(wn, {2, 3}));
    v.detach().copy_(Tensor::from_vector<float>(vn, {3}));
    nbt.detach().fill_(100.0);
    const double d = ema.update();
    EXPECT_DOUBLE_EQ(d, 0.9999 * (1 - std::exp(-static_cast<double>(u) / 2000)));
    for (size_t i = 0; i < 6; ++i) e[i] = d * e[i] + (1 - d) * wn[i];
    for (size_t i = 0; i < 3; ++i) ev[i] = d * ev[i] + (1 - d) * vn[i];
  }
  EXPECT_EQ(ema.updates(), 3);
  expect_near_vec(ema.at("w").to_vector<float>(), e);
  expect_near_vec(ema.at("v").to_vector<float>(), ev);
  EXPECT_EQ(ema.at("bn.num_batches_tracked").item<int64_t>(), 5);  // integer buffers are not averaged
  // The EMA owns copies: its tensors do not alias the model's.
  EXPECT_NE(ema.at("w").storage().get(), w.storage().get());
  // A floating entry outside the given flat buffers is refused.
  Tensor loose = Tensor::from_vector<float>({1, 2}, {2});
  EXPECT_THROW(training::ModelEMA({f1}, {{"w", w}, {"loose", loose}}), engine::Error);
  EXPECT_THROW(ema.at("other"), engine::Error);
}

// --- clip ------------------------------------------------------------------------------------

TEST(Clip, GlobalNormAndScaling) {
  Tensor a = param({0, 0, 0}), b = param({0, 0});
  Tensor c = Tensor::from_vector<float>({1}, {1});  // frozen: no grad, ignored
  ParamStore store({{"a", a}, {"c", c}, {"b", b}});
  set_grad(a, {3.f, 0.f, 4.f});
  set_grad(b, {12.f, 0.f});
  const double n = training::clip_grad_norm_(store, 6.5);
  EXPECT_NEAR(n, 13.0, 1e-6);
  const float coef = 6.5f / (13.0f + 1e-6f);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{3.f * coef, 0.f, 4.f * coef}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{12.f * coef, 0.f}));
  // Below the limit: unchanged.
  const double n2 = training::clip_grad_norm_(store, 10.0);
  EXPECT_NEAR(n2, 6.5, 1e-5);
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{12.f * coef, 0.f}));
  ParamStore frozen_only({{"c2", Tensor::from_vector<float>({1}, {1})}});
  EXPECT_EQ(training::clip_grad_norm_(frozen_only, 1.0), 0.0);
  // Large random case vs double reference.
  auto g = rand_vec(100000, 9, -3.f, 3.f);
  Tensor big = param(std::vector<float>(g.size(), 0.f));
  ParamStore big_store({{"big", big}});
  set_grad(big, g);
  double ss = 0;
  for (float x : g) ss += static_cast<double>(x) * x;
  EXPECT_NEAR(training::clip_grad_norm_(big_store, 10.0), std::sqrt(ss), 1e-6 * std::sqrt(ss));
  double ss2 = 0;
  for (float x : big.grad().to_vector<float>()) ss2 += static_cast<double>(x) * x;
  EXPECT_NEAR(std::sqrt(ss2), 10.0, 1e-4);
}

// --- FP16 rounding, freeze -------------------------------------------------------------------

TEST(Setup, RoundThroughFp16AndFreeze) {
  Tensor w = Tensor::from_vector<float>({1.0f + 1.0f / 4096.f, 0.1f, 70000.f}, {3});
  Tensor n = Tensor::from_vector<int64_t>({123456789}, {1});
  training::round_through_fp16_({{"w", w}, {"n", n}});
  auto v = w.to_vector<float>();
  EXPECT_EQ(v[0], 1.0f);                    // 1 + 2^-12 rounds to 1 in FP16 (10-bit mantissa)
  EXPECT_NEAR(v[1], 0.0999755859375f, 0.f);  // nearest FP16 to 0.1
  EXPECT_TRUE(std::isinf(v[2]));            // beyond 65504
  EXPECT_EQ(n.item<int64_t>(), 123456789);

  EXPECT_TRUE(training::freeze_prefixes({0}).empty());
  EXPECT_EQ(training::freeze_prefixes({3}), (std::vector<std::string>{"model.0.", "model.1.", "model.2."}));
  EXPECT_EQ(training::freeze_prefixes({1, 22}), (std::vector<std::string>{"model.1.", "model.22."}));
  NamedTensors ps = {{"model.1.conv.weight", param({1})}, {"model.11.conv.weight", param({1})},
                     {"model.22.cv2.0.0.conv.weight", param({1})}};
  auto frozen = training::apply_freeze(ps, training::freeze_prefixes({2}));
  EXPECT_EQ(frozen, (std::vector<std::string>{"model.1.conv.weight"}));
  EXPECT_FALSE(ps[0].second.requires_grad());
  EXPECT_TRUE(ps[1].second.requires_grad());
}
