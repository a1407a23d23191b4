// The alpha-beta-gamma cost model of our all-reduce algorithms (apps/training/dist/allreduce.h),
// fitted by least squares on measured runs (bench/allreduce_bench.cpp) and used to predict times
// past one machine (8 to 1024 ranks at a given link bandwidth and latency; docs/distributed.md).
//   alpha: seconds per exchange step (latency), beta: seconds per byte sent by one rank,
//   gamma: seconds per byte reduced locally.
// Sources: Hockney, "The communication challenge for MPP" (Parallel Computing 1994) for alpha-beta;
// Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH"
// (IJHPCA 2005), section 4.4, for the ring and halving-doubling costs with gamma; Patarasuk & Yuan
// (JPDC 2009) for the ring.
#pragma once
#include <vector>

#include "apps/training/dist/allreduce.h"

namespace training::dist {

/// The machine parameters of the model. alpha in seconds, beta and gamma in seconds per byte
/// (beta = 1 / link bandwidth in bytes/s).
struct CostParams {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double gamma_s_per_byte = 0;
};

/// The coefficients of one all-reduce's time: T = alpha * alpha_s + beta * beta_s_per_byte +
/// gamma * gamma_s_per_byte (alpha counts steps, beta and gamma count bytes).
struct CostTerms {
  double alpha = 0, beta = 0, gamma = 0;
};

/// The terms of `algo` (Ring or HalvingDoubling) for `bytes` on `world_size` ranks (>= 1):
///  - ring:  2(n-1) steps, 2(n-1)/n * bytes sent, (n-1)/n * bytes reduced;
///  - halving-doubling among the largest power of two p <= n: 2 log2(p) steps,
///    2(p-1)/p * bytes sent, (p-1)/p * bytes reduced; when n > p the fold (whole buffer to the
///    partner, reduced there) and the unfold (the result back) add 2 steps, 2 * bytes sent and
///    bytes reduced.
/// Per rank on the critical path; world size 1 costs nothing. Throws engine::Error for another
/// algorithm or world_size < 1.
CostTerms cost_terms(AllReduceAlgo algo, int world_size, double bytes);

/// Predicted seconds of one all-reduce (cost_terms weighted by `p`).
double predict_seconds(const CostParams& p, AllReduceAlgo algo, int world_size, double bytes);

/// One measured all-reduce: algorithm (Ring or HalvingDoubling), world size, payload bytes, seconds.
struct CostSample {
  AllReduceAlgo algo = AllReduceAlgo::Ring;
  int world_size = 2;
  double bytes = 0;
  double seconds = 0;
};

/// Fits alpha and beta to `samples` with gamma given (measured separately, see fit_line): in both
/// algorithms the beta and gamma terms are proportional (2:1) for every size and world size, so
/// all-reduce timings alone cannot separate them. Least squares on the relative error (weights
/// 1/seconds^2), so that 4 KiB and 256 MiB count alike; alpha and beta are constrained to be >= 0
/// (a negative one is set to 0 and the other refitted alone). Throws engine::Error with fewer than
/// two samples, a non-positive time, or samples that cannot determine both (all of one size).
CostParams fit_cost_model(const std::vector<CostSample>& samples, double gamma_s_per_byte);

/// A straight line y = intercept + slope * x.
struct LineFit {
  double intercept = 0, slope = 0;
};

/// Ordinary least squares line through (x[i], y[i]) (e.g. reduction-kernel seconds against bytes:
/// the slope is gamma). Throws engine::Error when x and y differ in length, have fewer than two
/// points, or all x are equal.
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y);

/// The payload (bytes) at which the predicted ring time equals halving-doubling's on `world_size`
/// ranks: halving-doubling is predicted faster below it. 0 when the ring is never slower, +inf
/// when halving-doubling is never slower (e.g. powers of two, where both send the same bytes and
/// halving-doubling takes fewer steps).
double predicted_cutover_bytes(const CostParams& p, int world_size);

}  // namespace training::dist
