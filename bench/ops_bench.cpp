// CPU throughput of memory-bound ops at YOLOv9-s shapes (640x640 input, batch 1): broadcast add
// (NCHW + [1,C,1,1] bias), concat along channels, nearest upsampling x2. Reports bytes/s
// (bytes read + written) through state.SetBytesProcessed.
#include <benchmark/benchmark.h>

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

}  // namespace

BENCHMARK_MAIN();
