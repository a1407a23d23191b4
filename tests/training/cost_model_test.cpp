// The alpha-beta-gamma cost model of the all-reduce algorithms (apps/training/dist/cost_model.h):
// its terms against hand counts of the exchanges, the least-squares fit recovering known
// parameters from synthetic timings (exact and with multiplicative noise), the non-negativity
// constraint, the errors on data that cannot determine the fit, and the predicted cut-over.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "apps/training/dist/cost_model.h"

namespace {

using training::dist::AllReduceAlgo;
using training::dist::CostParams;
using training::dist::CostSample;

std::vector<CostSample> synthetic(const CostParams& p, std::vector<int> worlds, double noise, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-noise, noise);
  std::vector<CostSample> out;
  for (int w : worlds)
    for (AllReduceAlgo a : {AllReduceAlgo::Ring, AllReduceAlgo::HalvingDoubling})
      for (double bytes = 4096; bytes <= 256.0 * 1024 * 1024; bytes *= 4) {
        const double t = training::dist::predict_seconds(p, a, w, bytes) * (1 + u(rng));
        out.push_back({a, w, bytes, t});
      }
  return out;
}

TEST(CostModel, TermsCountTheExchanges) {
  // Ring on 4 ranks: 3 reduce-scatter + 3 all-gather steps of bytes/4 each; 3 chunks reduced.
  auto r = training::dist::cost_terms(AllReduceAlgo::Ring, 4, 1024);
  EXPECT_DOUBLE_EQ(r.alpha, 6);
  EXPECT_DOUBLE_EQ(r.beta, 6 * 256);
  EXPECT_DOUBLE_EQ(r.gamma, 3 * 256);
  // Halving-doubling on 4 ranks: halves of 512 then 256 both ways; 512 + 256 reduced.
  auto h = training::dist::cost_terms(AllReduceAlgo::HalvingDoubling, 4, 1024);
  EXPECT_DOUBLE_EQ(h.alpha, 4);
  EXPECT_DOUBLE_EQ(h.beta, 2 * (512 + 256));
  EXPECT_DOUBLE_EQ(h.gamma, 512 + 256);
  // 3 ranks: fold (1024 sent, reduced), 2-rank exchange of 512 each way, unfold (1024 sent).
  auto h3 = training::dist::cost_terms(AllReduceAlgo::HalvingDoubling, 3, 1024);
  EXPECT_DOUBLE_EQ(h3.alpha, 4);
  EXPECT_DOUBLE_EQ(h3.beta, 1024 + 2 * 512 + 1024);
  EXPECT_DOUBLE_EQ(h3.gamma, 1024 + 512);
  // 1 rank: nothing moves.
  auto one = training::dist::cost_terms(AllReduceAlgo::Ring, 1, 1024);
  EXPECT_EQ(one.alpha + one.beta + one.gamma, 0);
  EXPECT_THROW(training::dist::cost_terms(AllReduceAlgo::Library, 4, 1024), engine::Error);
  EXPECT_THROW(training::dist::cost_terms(AllReduceAlgo::Ring, 0, 1024), engine::Error);
}

TEST(CostModel, FitRecoversExactParameters) {
  const CostParams truth{7e-6, 1.0 / 3e9, 1.0 / 10e9};
  for (auto worlds : {std::vector<int>{2}, std::vector<int>{3}, std::vector<int>{2, 3, 4}}) {
    const CostParams fit = training::dist::fit_cost_model(synthetic(truth, worlds, 0, 1), truth.gamma_s_per_byte);
    EXPECT_NEAR(fit.alpha_s, truth.alpha_s, 1e-9 * truth.alpha_s) << "worlds " << worlds.size();
    EXPECT_NEAR(fit.beta_s_per_byte, truth.beta_s_per_byte, 1e-9 * truth.beta_s_per_byte);
    EXPECT_EQ(fit.gamma_s_per_byte, truth.gamma_s_per_byte);
  }
}

TEST(CostModel, FitWithNoiseStaysClose) {
  // +-10 % multiplicative noise: the relative-error fit keeps alpha (seen only at small sizes)
  // and beta (large sizes) within 10 %.
  const CostParams truth{20e-6, 1.0 / 2e9, 1.0 / 8e9};
  const CostParams fit = training::dist::fit_cost_model(synthetic(truth, {2, 3, 4}, 0.10, 7), truth.gamma_s_per_byte);
  EXPECT_NEAR(fit.alpha_s, truth.alpha_s, 0.1 * truth.alpha_s);
  EXPECT_NEAR(fit.beta_s_per_byte, truth.beta_s_per_byte, 0.1 * truth.beta_s_per_byte);
}

TEST(CostModel, FitKeepsParametersNonNegative) {
  // Timings proportional to the payload with a gamma that explains more than all of them would
  // need a negative beta; the fit sets beta to 0 and explains the rest with alpha.
  std::vector<CostSample> s;
  for (double b = 4096; b <= 1 << 20; b *= 2) s.push_back({AllReduceAlgo::Ring, 2, b, 1e-4 + b * 1e-10});
  const CostParams fit = training::dist::fit_cost_model(s, 4e-10);  // 2e-10 s/B of the 1e-10 measured
  EXPECT_EQ(fit.beta_s_per_byte, 0);
  EXPECT_GT(fit.alpha_s, 0);
  // And a pure bandwidth line gives alpha 0, never negative.
  s.clear();
  for (double b = 4096; b <= 1 << 24; b *= 2) s.push_back({AllReduceAlgo::Ring, 2, b, b * 1e-9 - 1e-7});
  const CostParams fit2 = training::dist::fit_cost_model(s, 0);
  EXPECT_EQ(fit2.alpha_s, 0);
  EXPECT_GT(fit2.beta_s_per_byte, 0);
}

TEST(CostModel, FitRejectsDataThatCannotDetermineIt) {
  EXPECT_THROW(training::dist::fit_cost_model({{AllReduceAlgo::Ring, 2, 4096, 1e-5}}, 0), engine::Error);
  // One size only: alpha and beta are confounded.
  std::vector<CostSample> one_size{{AllReduceAlgo::Ring, 2, 4096, 1e-5}, {AllReduceAlgo::Ring, 2, 4096, 1.1e-5}};
  EXPECT_THROW(training::dist::fit_cost_model(one_size, 0), engine::Error);
  std::vector<CostSample> zero_time{{AllReduceAlgo::Ring, 2, 4096, 0}, {AllReduceAlgo::Ring, 2, 8192, 1e-5}};
  EXPECT_THROW(training::dist::fit_cost_model(zero_time, 0), engine::Error);
}

TEST(CostModel, FitLine) {
  const auto f = training::dist::fit_line({1, 2, 3, 4}, {3.5, 5.5, 7.5, 9.5});
  EXPECT_NEAR(f.slope, 2, 1e-12);
  EXPECT_NEAR(f.intercept, 1.5, 1e-12);
  EXPECT_THROW(training::dist::fit_line({1, 1}, {2, 3}), engine::Error);
  EXPECT_THROW(training::dist::fit_line({1}, {2}), engine::Error);
}

TEST(CostModel, PredictedCutover) {
  const CostParams p{5e-6, 1.0 / 25e9, 1.0 / 50e9};
  // Powers of two: the same bytes, fewer steps: halving-doubling never loses.
  EXPECT_TRUE(std::isinf(training::dist::predicted_cutover_bytes(p, 4)));
  EXPECT_TRUE(std::isinf(training::dist::predicted_cutover_bytes(p, 1024)));
  // 2 ranks: the same two exchanges; 3 ranks: the same 4 steps, more bytes for the fold.
  EXPECT_EQ(training::dist::predicted_cutover_bytes(p, 2), 0);
  EXPECT_EQ(training::dist::predicted_cutover_bytes(p, 3), 0);
  // 6 ranks: 10 ring steps against 4 + 2; the crossing is where the times are equal.
  const double c = training::dist::predicted_cutover_bytes(p, 6);
  ASSERT_GT(c, 0);
  ASSERT_TRUE(std::isfinite(c));
  EXPECT_NEAR(training::dist::predict_seconds(p, AllReduceAlgo::Ring, 6, c),
              training::dist::predict_seconds(p, AllReduceAlgo::HalvingDoubling, 6, c), 1e-12);
  EXPECT_LT(training::dist::predict_seconds(p, AllReduceAlgo::HalvingDoubling, 6, c / 2),
            training::dist::predict_seconds(p, AllReduceAlgo::Ring, 6, c / 2));
  EXPECT_GT(training::dist::predict_seconds(p, AllReduceAlgo::HalvingDoubling, 6, c * 2),
            training::dist::predict_seconds(p, AllReduceAlgo::Ring, 6, c * 2));
}

}  // namespace
