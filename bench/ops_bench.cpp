// CPU throughput of memory-bound ops at YOLOv9-s shapes (640x640 input, batch 1): broadcast add
// (NCHW + [1,C,1,1] bias), concat along channels, nearest upsampling x2; and the training-mode
// BatchNorm2d forward + backward at gelan-t 128 px batch-16 shapes. Reports bytes/s (bytes read +
// written) through state.SetBytesProcessed.
#include <benchmark/benchmark.h>

#include <chrono>

#include "engine/autograd.h"
#include "ops/ops.h"

using engine::Shape;
using engine::Tensor;

namespace {

Tensor filled(const Shape& s, double v) { return Tensor::full(s, v); }

void BM_AddBroadcastBias(benchmark::State& state) {
  engine::autograd::NoGradGuard ng;
  const int64_t c = state.range(0), hw = state.range(1);
  Tensor x = filled({1, c, hw, hw}, 1.0), b = filled({1, c, 1, 1}, 2.0);
  for (auto _ : state) benchmark::DoNotOptimize(ops::add(x, b).data_ptr());
  state.SetBytesProcessed(state.iterations() * x.numel() * 4 * 2);
}
BENCHMARK(BM_AddBroadcastBias)->Args({64, 160})->Args({128, 80})->Args({256, 40})->Unit(benchmark::kMicrosecond);

void BM_AddSameShape(benchmark::State& state) {
  engine::autograd::NoGradGuard ng;
  const int64_t c = state.range(0), hw = state.range(1);
  Tensor x = filled({1, c, hw, hw}, 1.0), y = filled({1, c, hw, hw}, 2.0);
  for (auto _ : state) benchmark::DoNotOptimize(ops::add(x, y).data_ptr());
  state.SetBytesProcessed(state.iterations() * x.numel() * 4 * 3);
}
BENCHMARK(BM_AddSameShape)->Args({64, 160})->Unit(benchmark::kMicrosecond);

void BM_ConcatChannels(benchmark::State& state) {
  engine::autograd::NoGradGuard ng;
  const int64_t c = state.range(0), hw = state.range(1);
  // RepNCSPELAN4-style concat of four branches.
  std::vector<Tensor> xs(4, filled({1, c, hw, hw}, 1.0));
  for (auto _ : state) benchmark::DoNotOptimize(ops::concat(xs, 1).data_ptr());
  state.SetBytesProcessed(state.iterations() * 4 * c * hw * hw * 4 * 2);
}
BENCHMARK(BM_ConcatChannels)->Args({32, 160})->Args({64, 80})->Args({128, 40})->Unit(benchmark::kMicrosecond);

void BM_UpsampleNearest2x(benchmark::State& state) {
  engine::autograd::NoGradGuard ng;
  const int64_t c = state.range(0), hw = state.range(1);
  Tensor x = filled({1, c, hw, hw}, 1.0);
  for (auto _ : state) benchmark::DoNotOptimize(ops::upsample_nearest(x, 2).data_ptr());
  state.SetBytesProcessed(state.iterations() * x.numel() * 4 * 5);  // read 1, write 4
}
BENCHMARK(BM_UpsampleNearest2x)->Args({64, 80})->Args({256, 20})->Args({128, 40})->Unit(benchmark::kMicrosecond);

// Training-mode BatchNorm2d forward (batch statistics, two passes over x, then the normalisation)
// and backward (the per-channel dy sums, then dx) on x [16, C, HW, HW]: the shapes of a gelan-t
// 128 px batch-16 training step, whose CPU time was 10% BatchNorm before its sums were vectorised.
void BM_BatchNormTrain(benchmark::State& state) {
  const int64_t c = state.range(0), hw = state.range(1);
  Tensor x = Tensor::full({16, c, hw, hw}, 0.0);
  float* p = static_cast<float*>(x.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f;
  x.set_requires_grad(true);
  Tensor w = filled({c}, 1.0).set_requires_grad(true), b = filled({c}, 0.0).set_requires_grad(true);
  Tensor rm = filled({c}, 0.0), rv = filled({c}, 1.0), g = filled({16, c, hw, hw}, 0.5);
  for (auto _ : state) {
    Tensor y = ops::batch_norm(x, w, b, rm, rv, /*training=*/true, 0.03, 1e-3);
    y.backward(g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  // Nominal traffic: forward reads x three times (two statistics passes, the normalisation) and
  // writes y; backward reads x and dy for the sums, again for dx, and writes dx (x's gradient is
  // also accumulated into x.grad, not counted).
  state.SetBytesProcessed(state.iterations() * x.numel() * 4 * 9);
}
BENCHMARK(BM_BatchNormTrain)->Args({16, 64})->Args({32, 32})->Args({64, 16})->Args({128, 4})
    ->Unit(benchmark::kMicrosecond);

// The Conv block's BN + SiLU in training, forward + backward: ops::batch_norm_silu (fused:1) against
// silu(batch_norm(...)) (fused:0, the baseline), same shapes as BM_BatchNormTrain. The fused form
// keeps no normalised copy and passes over the activation fewer times; its `speedup` counter is the
// baseline's time (measured first, in the same run) over its own.
/// Seconds per forward + backward of the Conv block's BN + SiLU on [16, c, hw, hw]: fused
/// (ops::batch_norm_silu) or the two ops, on the plain or the blocked layout (block 16).
double bn_silu_train_seconds(benchmark::State& state, int64_t c, int64_t hw, bool fused, bool blocked) {
  Tensor x = Tensor::full({16, c, hw, hw}, 0.0);
  float* p = static_cast<float*>(x.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>((i * 7919) % 1000) * 4e-3f - 2.f;
  Tensor g = filled({16, c, hw, hw}, 0.5);
  if (blocked) {
    engine::autograd::NoGradGuard ng;
    x = ops::to_blocked(x, 16);
    g = ops::to_blocked(g, 16);
  }
  x.set_requires_grad(true);
  Tensor w = filled({c}, 1.0).set_requires_grad(true), b = filled({c}, 0.0).set_requires_grad(true);
  Tensor rm = filled({c}, 0.0), rv = filled({c}, 1.0);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    Tensor y = fused ? ops::batch_norm_silu(x, w, b, rm, rv, true, 0.03, 1e-3)
                     : ops::silu(ops::batch_norm(x, w, b, rm, rv, true, 0.03, 1e-3));
    y.backward(g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
         static_cast<double>(state.iterations());
}

/// The slot of a (c, hw) row of the BN + SiLU benchmarks (their baselines, measured first).
int bn_silu_slot(int64_t c, int64_t hw) { return c == 16 ? 0 : c == 32 ? 1 : c == 64 ? 2 : hw == 8 ? 3 : 4; }

/// One row (c, hw, candidate) of a BN + SiLU comparison: the baseline (candidate 0, run first)
/// keeps its time in baselines[slot]; the candidate gets `speedup` = that time / its own.
/// vary_fused: the candidate is the fused op against the two ops (plain layout); else the fused op
/// on the blocked layout against the plain one.
void bn_silu_row(benchmark::State& state, double* baselines, bool vary_fused) {
  const int64_t c = state.range(0), hw = state.range(1);
  const bool candidate = state.range(2) != 0;
  const double per = bn_silu_train_seconds(state, c, hw, vary_fused ? candidate : true, vary_fused ? false : candidate);
  const int slot = bn_silu_slot(c, hw);
  if (!candidate) baselines[slot] = per;
  if (candidate && baselines[slot] > 0) state.counters["speedup"] = baselines[slot] / per;
}

double g_bn_silu_baseline[5] = {};
void BM_BatchNormSiluTrain(benchmark::State& state) { bn_silu_row(state, g_bn_silu_baseline, /*vary_fused=*/true); }
BENCHMARK(BM_BatchNormSiluTrain)
    ->ArgNames({"c", "hw", "fused"})
    ->Args({16, 64, 0})->Args({16, 64, 1})
    ->Args({32, 32, 0})->Args({32, 32, 1})
    ->Args({64, 16, 0})->Args({64, 16, 1})
    ->Args({128, 8, 0})->Args({128, 8, 1})
    ->Args({128, 4, 0})->Args({128, 4, 1})
    ->Unit(benchmark::kMicrosecond);

// The same train step (ops::batch_norm_silu, forward + backward) on the blocked channel layout
// (blocked:1, block 16: [16, C / 16, HW, HW, 16], as the blocked convolutions of a training step
// leave it) against the plain layout (blocked:0, the baseline); `speedup` as above. The 4 x 4 maps
// run unfused on both (silu(batch_norm(...))).
double g_bn_blocked_baseline[5] = {};
void BM_BatchNormSiluTrainBlocked(benchmark::State& state) {
  bn_silu_row(state, g_bn_blocked_baseline, /*vary_fused=*/false);
}
BENCHMARK(BM_BatchNormSiluTrainBlocked)
    ->ArgNames({"c", "hw", "blocked"})
    ->Args({16, 64, 0})->Args({16, 64, 1})
    ->Args({32, 32, 0})->Args({32, 32, 1})
    ->Args({64, 16, 0})->Args({64, 16, 1})
    ->Args({128, 8, 0})->Args({128, 8, 1})
    ->Args({128, 4, 0})->Args({128, 4, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
