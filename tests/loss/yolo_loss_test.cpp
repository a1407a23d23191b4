// yolo_loss: the synthetic reference values of shared/spec/loss.md section 10 (official loss
// code, single and dual), a finite-difference gradient check in double, error cases, and the
// device-side finishing (yolo_loss_finish) and backward coefficients against the host arithmetic
// they replaced, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/backend.h"
#include "engine/error.h"
#include "kernels/common/yolo_loss.h"
#include "ops/reduce.h"
#include "ops/yolo_loss.h"
#include "tests/testutil.h"

using engine::Tensor;

namespace {
// Spec section 10: v(l, b, c, y, x; shift), float64 then rounded to float32.
std::vector<Tensor> synthetic_levels(int64_t B, int64_t no, int64_t img, double shift, engine::DType dt) {
  std::vector<Tensor> out;
  const int64_t strides[3] = {8, 16, 32};
  for (int l = 0; l < 3; ++l) {
    const int64_t h = img / strides[l], w = h;
    std::vector<float> v;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < no; ++c)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x)
            v.push_back(static_cast<float>(2.0 * std::sin(0.1 * (c + 1) + 0.37 * (x + 1) + 0.53 * (y + 1) +
                                                          0.71 * (b + 1) + 1.3 * l + shift)));
    out.push_back(Tensor::from_vector(v, {B, no, h, w}).to(dt));
  }
  return out;
}
Tensor spec_targets() {
  return Tensor::from_vector<float>({0, 1, 0.5f, 0.5f, 0.5f, 0.4f, 0, 0, 0.25f, 0.3f, 0.3f, 0.35f, 1, 2, 0.6f, 0.55f,
                                     0.7f, 0.6f},
                                    {3, 6});
}
}  // namespace

TEST(YoloLoss, SpecSyntheticSingle) {
  auto lv = synthetic_levels(2, 67, 64, 0.0, engine::DType::F32);
  auto r = ops::yolo_loss({lv}, spec_targets(), ops::YoloLossConfig::single(3));
  auto it = r.items.to_vector<double>();
  EXPECT_NEAR(it[0], 3.756861925125122, 1e-5 * 3.76);
  EXPECT_NEAR(it[1], 154.39581298828125, 1e-5 * 154.4);
  EXPECT_NEAR(it[2], 2.346757411956787, 1e-5 * 2.35);
  EXPECT_NEAR(r.total.item<double>(), 320.9988708496094, 1e-5 * 321);
  EXPECT_NEAR(r.target_scores_sum[0].item<double>(), 1.0, 0);
  // Foreground anchors listed in the spec must be foreground here (extra zero-weight ones allowed
  // by the spec's top-k tie note).
  auto fg = r.assign[0].fg_mask.to(engine::DType::I32).to_vector<int32_t>();
  for (int a : {9, 17, 21, 25, 26, 27, 28, 29, 35, 36, 37, 43, 44, 45}) EXPECT_EQ(fg[a], 1) << "img 0 anchor " << a;
  for (int a : {21, 22, 23, 28, 29, 30, 31, 36, 37, 38}) EXPECT_EQ(fg[84 + a], 1) << "img 1 anchor " << a;
  int n = 0;
  for (int v : fg) n += v;
  EXPECT_EQ(n, 24);
}

TEST(YoloLoss, SpecSyntheticDual) {
  auto aux = synthetic_levels(2, 67, 64, 0.9, engine::DType::F32);
  auto mainb = synthetic_levels(2, 67, 64, 0.0, engine::DType::F32);
  auto r = ops::yolo_loss({aux, mainb}, spec_targets(), ops::YoloLossConfig::dual(3));
  auto it = r.items.to_vector<double>();
  EXPECT_NEAR(it[0], 4.657377243041992, 1e-5 * 4.66);
  EXPECT_NEAR(it[1], 208.2245635986328, 1e-5 * 208.2);
  EXPECT_NEAR(it[2], 2.9116389751434326, 1e-5 * 2.91);
  EXPECT_NEAR(r.total.item<double>(), 431.587158203125, 1e-5 * 431.6);
}

TEST(YoloLoss, GradcheckDoubleDual) {
  // 32x32 input: grids 4x4, 2x2, 1x1 (A = 21 >= topk). Smaller logits keep the assignment away
  // from decision boundaries under the finite-difference step.
  auto aux = synthetic_levels(1, 67, 32, 0.9, engine::DType::F64);
  auto mainb = synthetic_levels(1, 67, 32, 0.0, engine::DType::F64);
  Tensor tg = spec_targets().narrow(0, 0, 2).contiguous();  // the two gts of image 0
  std::vector<Tensor> in = aux;
  in.insert(in.end(), mainb.begin(), mainb.end());
  // The official loss treats the assignment as constant (no_grad assigner), so the finite
  // differences run with the assignment frozen at the unperturbed point.
  ops::YoloLossConfig cfg = ops::YoloLossConfig::dual(3);
  cfg.fixed_assign = ops::yolo_loss({aux, mainb}, tg, cfg).assign;
  int64_t npos = 0;
  for (auto& a : cfg.fixed_assign) npos += ops::sum(a.fg_mask.to(engine::DType::F64)).item<double>();
  EXPECT_GT(npos, 0);
  auto f = [tg, cfg](const std::vector<Tensor>& x) {
    return ops::yolo_loss({{x[0], x[1], x[2]}, {x[3], x[4], x[5]}}, tg, cfg).total;
  };
  EXPECT_TRUE(testutil::gradcheck(f, in, 1e-6, 1e-5, 1e-7));
}

TEST(YoloLoss, NoTargetsGivesClsOnly) {
  auto lv = synthetic_levels(1, 67, 32, 0.0, engine::DType::F32);
  for (auto& t : lv) t.set_requires_grad(true);
  auto r = ops::yolo_loss({lv}, Tensor::zeros({0, 6}), ops::YoloLossConfig::single(3));
  auto it = r.items.to_vector<double>();
  EXPECT_EQ(it[0], 0.0);
  EXPECT_EQ(it[2], 0.0);
  EXPECT_GT(it[1], 0.0);
  r.total.backward();
  ASSERT_TRUE(lv[0].grad().defined());
  // Box-distribution channels get no gradient without positives.
  auto g = lv[0].grad().narrow(1, 0, 64).contiguous().to_vector<float>();
  for (float v : g) EXPECT_EQ(v, 0.f);
}

// The cls loss terms follow the official nn.BCEWithLogitsLoss(pos_weight=[1]) in float32: values
// from PyTorch 1.13 (CPU, float32) for the class logits an nc=80 head starts with (bias_init
// log(5 / 80 / (640 / s)^2) ~ -11.5 at stride 8). The pos_weight order rounds log(1 + e^x) through
// m = -x, so these differ from the exact BCE by up to 100% (x = -15.04 gives 0, exact 2.9e-7).
TEST(YoloLoss, ClsTermsFollowOfficialPosWeightOrder) {
  const int64_t nc = 80, no = 64 + nc;
  // 32x32 input: levels 4x4, 2x2, 1x1; every class logit of a level is one value.
  const float logit[3] = {-11.5f, -9.21034049987793f, -15.040399551391602f};
  const double official[3] = {1.049041748046875e-05, 0.00010013580322265625, 0.0};  // BCE(x, t=0)
  std::vector<Tensor> lv;
  double want = 0;
  for (int l = 0; l < 3; ++l) {
    const int64_t h = 4 >> l;
    Tensor t = Tensor::zeros({1, no, h, h});
    t.narrow(1, 64, nc).fill_(logit[l]);
    lv.push_back(t);
    want += static_cast<double>(nc * h * h) * official[l];
  }
  auto r = ops::yolo_loss({lv}, Tensor::zeros({0, 6}), ops::YoloLossConfig::single(nc));
  const auto it = r.items.to_vector<double>();
  EXPECT_NEAR(it[1], 0.5 * want, 1e-6 * 0.5 * want) << "cls gain 0.5, target_scores_sum clamped to 1";
  EXPECT_EQ(it[0], 0.0);
  EXPECT_EQ(it[2], 0.0);
}

TEST(YoloLoss, ShapeErrors) {
  auto lv = synthetic_levels(1, 67, 32, 0.0, engine::DType::F32);
  EXPECT_THROW(ops::yolo_loss({lv}, spec_targets(), ops::YoloLossConfig::single(4)), engine::ShapeError);
  EXPECT_THROW(ops::yolo_loss({lv}, spec_targets(), ops::YoloLossConfig::dual(3)), engine::ShapeError);
  // spec_targets has image index 1 but B = 1.
  EXPECT_THROW(ops::yolo_loss({lv}, spec_targets(), ops::YoloLossConfig::single(3)), engine::ShapeError);
}

// --- device-side finishing and backward coefficients vs the former host arithmetic -------------

namespace {

// The host arithmetic ops::yolo_loss ran before the finishing moved into yolo_loss_finish: tss and
// out [4] in double, rounded to the maps' dtype (F32 rounds every L_k,i first).
void host_finish(const std::vector<double>& sv, const std::vector<double>& bw, const double gains[3], int64_t LB,
                 engine::DType dt, std::vector<double>* tss, std::vector<double>* outv) {
  const size_t K = bw.size();
  // Through a volatile: GCC 12's SLP vectorizer (-O3) drops this round trip in some lanes otherwise.
  auto round = [&](double v) {
    if (dt != engine::DType::F32) return v;
    volatile float f = static_cast<float>(v);
    return static_cast<double>(f);
  };
  std::vector<double> raw(3 * K);
  tss->clear();
  for (size_t k = 0; k < K; ++k) {
    const double d = std::max(sv[4 * k], 1.0);
    tss->push_back(round(d));
    const double rd[3] = {sv[4 * k + 1] / d, sv[4 * k + 2] / d, sv[4 * k + 3] / d};
    for (int i = 0; i < 3; ++i) raw[3 * k + i] = round(rd[i]);
  }
  outv->assign(4, 0.0);
  for (int i = 0; i < 3; ++i) {
    double s = 0;
    for (size_t k = 0; k < K; ++k) s += bw[k] * raw[3 * k + i];
    (*outv)[i] = gains[i] * s;
  }
  (*outv)[3] = ((*outv)[0] + (*outv)[1] + (*outv)[2]) * static_cast<double>(LB);
  for (double& v : *outv) v = round(v);
}

// Bitwise equality of doubles (NaN equals NaN with the same bits).
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST(YoloLoss, FinishEntryEqualsHostArithmetic) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> u(0, 1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double gains[3] = {7.5, 0.5, 1.5};
  for (engine::DType dt : {engine::DType::F32, engine::DType::F64})
    for (int trial = 0; trial < 50; ++trial) {
      const size_t K = 1 + trial % 3;
      std::vector<double> bw, sv;
      for (size_t k = 0; k < K; ++k) {
        bw.push_back(k == 0 && K > 1 ? 0.25 : 0.1 + u(rng));
        // ts_sum below 1 (clamped), around 1 and large; trial 7 a NaN ts_sum, trial 9 an inf box sum.
        const double ts = trial % 4 == 0 ? 0.3 * u(rng) : (trial % 4 == 1 ? 1.0 : 1 + 500 * u(rng));
        sv.insert(sv.end(), {trial == 7 ? nan : ts, 1e3 * u(rng), trial == 9 ? INFINITY : 1e4 * u(rng), 1e2 * u(rng)});
      }
      const int64_t LB = 1 + trial % 16;
      std::vector<double> want_tss, want_out;
      host_finish(sv, bw, gains, LB, dt, &want_tss, &want_out);
      Tensor sums = Tensor::from_vector(sv, {static_cast<int64_t>(K), 4});
      Tensor tss = Tensor::empty({static_cast<int64_t>(K)}, dt), out = Tensor::empty({4}, dt);
      auto k = engine::kernel(kernels::kYoloLossFinish, dt, engine::Device::cpu());
      k.fn(k.ctx, dt, sums.data<double>(), static_cast<int64_t>(K), bw.data(), gains, LB, tss.data_ptr(),
           out.data_ptr());
      const auto got_tss = tss.to(engine::DType::F64).to_vector<double>();
      const auto got_out = out.to(engine::DType::F64).to_vector<double>();
      for (size_t j = 0; j < K; ++j) EXPECT_TRUE(same_bits(got_tss[j], want_tss[j])) << "tss " << j << " trial " << trial;
      for (int j = 0; j < 4; ++j)
        EXPECT_TRUE(same_bits(got_out[j], want_out[j]))
            << engine::dtype_name(dt) << " trial " << trial << " out[" << j << "] " << got_out[j] << " vs " << want_out[j];
    }
}

// A case where GCC 12 -O3 dropped the F32 rounding of L_k,box in the former host code: the values
// from numpy (float(np.float32(sum / tss)) per branch, then the double arithmetic).
TEST(YoloLoss, FinishEntryRoundsEveryBranchTerm) {
  const std::vector<double> sv = {222.28440535962849, 15.502237467560589, 8627.1103354086372, 38.853853868688617,
                                  31.7,               15.502237467560589, 8627.1103354086372, 38.853853868688617};
  const double bw[2] = {0.25, 1.0}, gains[3] = {7.5, 0.5, 1.5};
  Tensor sums = Tensor::from_vector(sv, {2, 4});
  Tensor tss = Tensor::empty({2}), out = Tensor::empty({4});
  auto k = engine::kernel(kernels::kYoloLossFinish, engine::DType::F32, engine::Device::cpu());
  k.fn(k.ctx, engine::DType::F32, sums.data<double>(), 2, bw, gains, 2, tss.data_ptr(), out.data_ptr());
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{3.7984855175018311f, 140.92568969726562f,
                                                        1.9040580987930298f, 293.2564697265625f}));
  EXPECT_EQ(tss.to_vector<float>(), (std::vector<float>{222.28440535962849f, 31.7f}));
}

TEST(YoloLoss, GradCoefEqualsHostArithmetic) {
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> u(-2, 2);
  const double gains[3] = {7.5, 0.5, 1.5};
  for (int trial = 0; trial < 200; ++trial) {
    const double g[4] = {u(rng), u(rng), u(rng), trial % 5 == 0 ? 0.0 : u(rng)};
    const double w = trial % 2 ? 0.25 : 1.0 + u(rng);
    const int64_t LB = 1 + trial % 32;
    const double tss = 1 + 100 * std::fabs(u(rng));
    // Former host side: coef in double from g read as F64, then the kernel's T(coef) * (1 / tss).
    auto check = [&](auto zero) {
      using T = decltype(zero);
      const T gt[4] = {static_cast<T>(g[0]), static_cast<T>(g[1]), static_cast<T>(g[2]), static_cast<T>(g[3])};
      const T inv = T(1) / static_cast<T>(tss);
      T want[3];
      for (int i = 0; i < 3; ++i)
        want[i] = static_cast<T>(w * gains[i] * (static_cast<double>(gt[i]) + static_cast<double>(LB) * gt[3])) * inv;
      T cb, cc, cd;
      kernels::yolo_loss_grad_coef<T>(gt, w, gains, static_cast<double>(LB), inv, cb, cc, cd);
      EXPECT_EQ(cb, want[0]) << "trial " << trial;
      EXPECT_EQ(cc, want[1]) << "trial " << trial;
      EXPECT_EQ(cd, want[2]) << "trial " << trial;
    };
    check(float(0));
    check(double(0));
  }
}

// The op's items, total and target_scores_sum equal the host arithmetic on the raw sums (taken,
// and scaled, in the reduce_sums hook, which sees them before the finishing), for a dual head in F32 and
// F64 and a loss_batch; the backward applies the branch weights (identical maps in both branches
// with weights 0.25 and 1: the first branch's gradient is exactly a quarter of the second's) and
// the incoming gradient (the items are detached: it arrives through total).
TEST(YoloLoss, DeviceFinishMatchesHostAndBackwardWeighsBranches) {
  for (engine::DType dt : {engine::DType::F32, engine::DType::F64}) {
    SCOPED_TRACE(engine::dtype_name(dt));
    auto aux = synthetic_levels(2, 67, 64, 0.9, dt);
    auto mainb = synthetic_levels(2, 67, 64, 0.0, dt);
    ops::YoloLossConfig cfg = ops::YoloLossConfig::dual(3);
    cfg.loss_batch = 5;
    std::vector<double> sv;
    // The hook stands in for an all-reduce: it scales the sums (as a sum over ranks would), so
    // target_scores_sum leaves the clamp at 1.
    cfg.reduce_sums = [&sv](Tensor& sums) {
      double* p = sums.data<double>();
      for (int64_t i = 0; i < sums.numel(); ++i) p[i] *= 37.25;
      sv = sums.to_vector<double>();
    };
    auto r = ops::yolo_loss({aux, mainb}, spec_targets(), cfg);
    ASSERT_EQ(sv.size(), 8u);
    std::vector<double> want_tss, want_out;
    const double gains[3] = {cfg.box_gain, cfg.cls_gain, cfg.dfl_gain};
    host_finish(sv, cfg.branch_weights, gains, cfg.loss_batch, dt, &want_tss, &want_out);
    const auto it = r.items.to(engine::DType::F64).to_vector<double>();
    for (int j = 0; j < 3; ++j) EXPECT_TRUE(same_bits(it[j], want_out[j])) << "item " << j;
    EXPECT_TRUE(same_bits(r.total.to(engine::DType::F64).item<double>(), want_out[3]));
    for (size_t k = 0; k < 2; ++k)
      EXPECT_TRUE(same_bits(r.target_scores_sum[k].to(engine::DType::F64).item<double>(), want_tss[k])) << k;
    EXPECT_GT(want_tss[0], 1.0);  // not the clamp: the division is exercised
  }
  // Backward: the same maps in both branches.
  auto lv = synthetic_levels(2, 67, 64, 0.0, engine::DType::F32);
  std::vector<Tensor> a, b;
  for (const Tensor& t : lv) {
    a.push_back(t.clone());
    b.push_back(t.clone());
    a.back().set_requires_grad(true);
    b.back().set_requires_grad(true);
  }
  ops::YoloLossConfig cfg = ops::YoloLossConfig::dual(3);
  cfg.loss_batch = 3;
  auto r = ops::yolo_loss({a, b}, spec_targets(), cfg);
  r.total.backward();
  for (size_t i = 0; i < a.size(); ++i) {
    const auto ga = a[i].grad().to_vector<float>(), gb = b[i].grad().to_vector<float>();
    ASSERT_EQ(ga.size(), gb.size());
    size_t nonzero = 0;
    for (size_t j = 0; j < ga.size(); ++j) {
      ASSERT_EQ(ga[j], 0.25f * gb[j]) << "level " << i << " element " << j;
      nonzero += gb[j] != 0.f;
    }
    EXPECT_GT(nonzero, 0u) << "level " << i;
  }
}
