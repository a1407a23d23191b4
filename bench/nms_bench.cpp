// NMS benchmarks on the CPU: the official non_max_suppression pipeline on 30000 candidate boxes
// (80 classes, seeded random boxes and scores), multi-label off and on, and the bare greedy NMS
// on 30000 boxes. Run: build/nms_bench [--benchmark_filter=...]. With YOLOV9_OFFICIAL set, the
// official non_max_suppression and torchvision.ops.nms are timed on the same kind of input in the
// same run (bench/official/nms_speed.py): counters official_ms and speedup (official / ours).
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include <chrono>

#include "bench/official_baseline.h"

#include "kernels/cpu/nms.h"
#include "ops/nms.h"

namespace {

constexpr int64_t kBoxes = 30000;
constexpr int64_t kClasses = 80;

/// Official timings (ms) from bench/official/nms_speed.py, measured once; 0 when unavailable.
double official_ms(const char* key) {
  static const nlohmann::json r = bench::run_official("nms_speed.py", "--iters 3").value_or(nlohmann::json::object());
  return r.value(key, 0.0);
}

void add_baseline(benchmark::State& state, double ours_ms, const char* key) {
  const double off = official_ms(key);
  if (off <= 0) return;
  state.counters["official_ms"] = off;
  state.counters["speedup"] = off / ours_ms;
}

double elapsed_ms(std::chrono::steady_clock::time_point t0, const benchmark::State& state) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
         static_cast<double>(state.iterations());
}

/// [1, 4 + 80, 30000]: boxes around 64 hotspots in a 640x640 image (so NMS suppresses), class
/// scores uniform in [0, 1) (every anchor is a candidate at conf 0.001).
engine::Tensor make_prediction(uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> hot(128);
  for (auto& h : hot) h = 40.f + 560.f * u(rng);
  std::vector<float> v(static_cast<size_t>((4 + kClasses) * kBoxes));
  for (int64_t a = 0; a < kBoxes; ++a) {
    const int64_t h = a % 64;
    v[0 * kBoxes + a] = hot[2 * h] + 20.f * (u(rng) - 0.5f);
    v[1 * kBoxes + a] = hot[2 * h + 1] + 20.f * (u(rng) - 0.5f);
    v[2 * kBoxes + a] = 20.f + 100.f * u(rng);
    v[3 * kBoxes + a] = 20.f + 100.f * u(rng);
    for (int64_t c = 0; c < kClasses; ++c) v[(4 + c) * kBoxes + a] = u(rng);
  }
  return engine::Tensor::from_vector<float>(v, {1, 4 + kClasses, kBoxes});
}

void BM_NonMaxSuppression(benchmark::State& state) {
  const engine::Tensor pred = make_prediction(7);
  ops::NmsOptions opt;
  opt.conf_thres = 0.001;  // val settings: every anchor is a candidate
  opt.iou_thres = 0.7;
  opt.multi_label = state.range(0) != 0;
  opt.max_det = 300;
  int64_t kept = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    auto out = ops::non_max_suppression(pred, opt);
    kept = out[0].size(0);
    benchmark::DoNotOptimize(kept);
  }
  add_baseline(state, elapsed_ms(t0, state), opt.multi_label ? "official_nms_multilabel_ms" : "official_nms_ms");
  state.counters["kept"] = static_cast<double>(kept);
  state.SetItemsProcessed(state.iterations() * kBoxes);
  state.SetLabel(opt.multi_label ? "multi_label (2.4M pairs -> max_nms 30000)" : "best class");
}
BENCHMARK(BM_NonMaxSuppression)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_GreedyNms30k(benchmark::State& state) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> boxes(4 * kBoxes), scores(kBoxes);
  for (int64_t i = 0; i < kBoxes; ++i) {
    const float x = 640.f * u(rng), y = 640.f * u(rng), w = 10.f + 60.f * u(rng), h = 10.f + 60.f * u(rng);
    boxes[4 * i] = x;
    boxes[4 * i + 1] = y;
    boxes[4 * i + 2] = x + w;
    boxes[4 * i + 3] = y + h;
    scores[i] = u(rng);
  }
  std::vector<int64_t> keep(kBoxes);
  const int64_t max_keep = state.range(0) ? state.range(0) : INT64_MAX;
  int64_t k = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    k = kernels::cpu::nms_greedy_cpu(boxes.data(), scores.data(), kBoxes, 0.45, keep.data(), max_keep);
    benchmark::DoNotOptimize(k);
  }
  if (state.range(0) == 0) add_baseline(state, elapsed_ms(t0, state), "torchvision_nms_30k_ms");
  state.counters["kept"] = static_cast<double>(k);
}
BENCHMARK(BM_GreedyNms30k)->Arg(300)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
