// Google Benchmark: conv2d forward / backward (data + weights) through oneDNN and batch_norm
// forward / backward (training mode) on the CPU at YOLOv9-s layer shapes. Reports GFLOP/s
// (2 x MACs per conv pass) and GB/s for batch_norm via rate counters.
#include <benchmark/benchmark.h>

#include "engine/autograd.h"
#include "ops/ops.h"

namespace {

using engine::DType;
using engine::Tensor;

struct ConvCfg {
  int64_t n, c, h, w, cout, k, s, p;
};
// 1x64x160x160 3x3 64->64 s1; 1x128x80x80 3x3 128->128 s2; 1x256x40x40 1x1 256->256.
const ConvCfg kCfgs[] = {{1, 64, 160, 160, 64, 3, 1, 1}, {1, 128, 80, 80, 128, 3, 2, 1}, {1, 256, 40, 40, 256, 1, 1, 0}};

Tensor filled(const engine::Shape& s, double v) { return Tensor::full(s, v, DType::F32); }

double conv_flops(const ConvCfg& c) {
  const int64_t ho = (c.h + 2 * c.p - c.k) / c.s + 1, wo = (c.w + 2 * c.p - c.k) / c.s + 1;
  return 2.0 * c.n * c.cout * ho * wo * c.c * c.k * c.k;
}

void BM_Conv2dForward(benchmark::State& st) {
  const ConvCfg c = kCfgs[st.range(0)];
  Tensor x = filled({c.n, c.c, c.h, c.w}, 0.5), w = filled({c.cout, c.c, c.k, c.k}, 0.01);
  engine::autograd::NoGradGuard ng;
  for (auto _ : st) benchmark::DoNotOptimize(ops::conv2d(x, w, Tensor(), {c.s, c.s}, {c.p, c.p}).data_ptr());
  st.counters["GFLOP/s"] = benchmark::Counter(conv_flops(c) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Conv2dBackward(benchmark::State& st) {
  const ConvCfg c = kCfgs[st.range(0)];
  Tensor x = filled({c.n, c.c, c.h, c.w}, 0.5).set_requires_grad(true);
  Tensor w = filled({c.cout, c.c, c.k, c.k}, 0.01).set_requires_grad(true);
  Tensor y;
  {
    engine::autograd::NoGradGuard ng;
    y = ops::conv2d(x, w, Tensor(), {c.s, c.s}, {c.p, c.p});
  }
  Tensor gy = filled(y.shape(), 1.0);
  for (auto _ : st) {
    st.PauseTiming();
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    Tensor out = ops::conv2d(x, w, Tensor(), {c.s, c.s}, {c.p, c.p});
    st.ResumeTiming();
    out.backward(gy);  // backward data + backward weights
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter(2 * conv_flops(c) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_BatchNormForward(benchmark::State& st) {
  const ConvCfg c = kCfgs[st.range(0)];
  const int64_t ho = (c.h + 2 * c.p - c.k) / c.s + 1, wo = (c.w + 2 * c.p - c.k) / c.s + 1;
  Tensor x = filled({c.n, c.cout, ho, wo}, 0.5), g = filled({c.cout}, 1), b = filled({c.cout}, 0);
  Tensor rm = filled({c.cout}, 0), rv = filled({c.cout}, 1);
  engine::autograd::NoGradGuard ng;
  for (auto _ : st) benchmark::DoNotOptimize(ops::batch_norm(x, g, b, rm, rv, true, 0.03, 1e-3).data_ptr());
  // Stats read x twice, normalise reads once and writes once.
  st.counters["GB/s"] = benchmark::Counter(4.0 * x.numel() * 4 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_BatchNormBackward(benchmark::State& st) {
  const ConvCfg c = kCfgs[st.range(0)];
  const int64_t ho = (c.h + 2 * c.p - c.k) / c.s + 1, wo = (c.w + 2 * c.p - c.k) / c.s + 1;
  Tensor x = filled({c.n, c.cout, ho, wo}, 0.5).set_requires_grad(true);
  Tensor g = filled({c.cout}, 1).set_requires_grad(true), b = filled({c.cout}, 0).set_requires_grad(true);
  Tensor rm = filled({c.cout}, 0), rv = filled({c.cout}, 1);
  Tensor gy = filled(x.shape(), 1.0);
  for (auto _ : st) {
    st.PauseTiming();
    x.set_grad(Tensor());
    g.set_grad(Tensor());
    b.set_grad(Tensor());
    Tensor y = ops::batch_norm(x, g, b, rm, rv, true, 0.03, 1e-3);
    st.ResumeTiming();
    y.backward(gy);
  }
  // Reads x and dy twice (sums, then dx), writes dx once.
  st.counters["GB/s"] = benchmark::Counter(5.0 * x.numel() * 4 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_Conv2dForward)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv2dBackward)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchNormForward)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchNormBackward)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
