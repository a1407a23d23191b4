// The alpha-beta-gamma cost model of the all-reduce algorithms (apps/training/dist/cost_model.h).
#include "apps/training/dist/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.h"

namespace training::dist {

CostTerms cost_terms(AllReduceAlgo algo, int world_size, double bytes) {
  Y9_CHECK(world_size >= 1, "cost model: world size ", world_size, " < 1");
  Y9_CHECK(bytes >= 0, "cost model: negative payload ", bytes);
  const double n = world_size;
  if (world_size == 1) return {};
  switch (algo) {
    case AllReduceAlgo::Ring: return {2 * (n - 1), 2 * (n - 1) / n * bytes, (n - 1) / n * bytes};
    case AllReduceAlgo::HalvingDoubling: {
      int p = 1, steps = 0;
      while (p * 2 <= world_size) p *= 2, ++steps;
      CostTerms t{2.0 * steps, 2.0 * (p - 1) / p * bytes, double(p - 1) / p * bytes};
      if (p != world_size) t.alpha += 2, t.beta += 2 * bytes, t.gamma += bytes;
      return t;
    }
    default: Y9_THROW(engine::Error, "cost model: algorithm ", allreduce_algo_name(algo), " is not ring or hd");
  }
}

double predict_seconds(const CostParams& p, AllReduceAlgo algo, int world_size, double bytes) {
  const CostTerms t = cost_terms(algo, world_size, bytes);
  return t.alpha * p.alpha_s + t.beta * p.beta_s_per_byte + t.gamma * p.gamma_s_per_byte;
}

CostParams fit_cost_model(const std::vector<CostSample>& samples, double gamma_s_per_byte) {
  Y9_CHECK(samples.size() >= 2, "cost model: ", samples.size(), " samples; the fit needs at least two");
  Y9_CHECK(gamma_s_per_byte >= 0 && std::isfinite(gamma_s_per_byte), "cost model: gamma ", gamma_s_per_byte,
           " is not a finite value >= 0");
  // Weighted normal equations of  min sum w (a alpha + b beta - y)^2,  y = t - g gamma, w = 1/t^2.
  double saa = 0, sab = 0, sbb = 0, say = 0, sby = 0;
  for (const CostSample& s : samples) {
    Y9_CHECK(s.seconds > 0 && std::isfinite(s.seconds), "cost model: sample of ", s.bytes, " bytes has time ",
             s.seconds, " s");
    const CostTerms t = cost_terms(s.algo, s.world_size, s.bytes);
    const double w = 1.0 / (s.seconds * s.seconds), y = s.seconds - t.gamma * gamma_s_per_byte;
    saa += w * t.alpha * t.alpha, sab += w * t.alpha * t.beta, sbb += w * t.beta * t.beta;
    say += w * t.alpha * y, sby += w * t.beta * y;
  }
  const double det = saa * sbb - sab * sab;
  Y9_CHECK(saa > 0 && sbb > 0 && det > 1e-12 * saa * sbb, "cost model: the samples do not determine alpha and beta ",
           "(they need at least two payload sizes on more than one rank)");
  CostParams p;
  p.gamma_s_per_byte = gamma_s_per_byte;
  p.alpha_s = (say * sbb - sby * sab) / det;
  p.beta_s_per_byte = (saa * sby - sab * say) / det;
  // Projected onto alpha, beta >= 0: refit the other one alone (the constrained optimum of a
  // two-variable convex quadratic lies on that edge when the free optimum is outside).
  if (p.alpha_s < 0) p.alpha_s = 0, p.beta_s_per_byte = std::max(0.0, sby / sbb);
  if (p.beta_s_per_byte < 0) p.beta_s_per_byte = 0, p.alpha_s = std::max(0.0, say / saa);
  return p;
}

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  Y9_CHECK(x.size() == y.size() && x.size() >= 2, "fit_line: ", x.size(), " x and ", y.size(),
           " y values; need two or more pairs");
  const double n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
  mx /= n, my /= n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  Y9_CHECK(sxx > 0, "fit_line: every x equals ", mx);
  LineFit f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  return f;
}

double predicted_cutover_bytes(const CostParams& p, int world_size) {
  // T(bytes) = a alpha + bytes * k for both algorithms; halving-doubling is faster while
  // T_ring - T_hd = da + bytes * dk > 0.
  const CostTerms r = cost_terms(AllReduceAlgo::Ring, world_size, 1.0);
  const CostTerms h = cost_terms(AllReduceAlgo::HalvingDoubling, world_size, 1.0);
  const double da = (r.alpha - h.alpha) * p.alpha_s;
  const double dk = (r.beta - h.beta) * p.beta_s_per_byte + (r.gamma - h.gamma) * p.gamma_s_per_byte;
  if (da <= 0) return 0;  // the ring takes no more steps: never slower
  if (dk >= 0) return std::numeric_limits<double>::infinity();
  return da / -dk;
}

}  // namespace training::dist
