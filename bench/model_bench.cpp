// Google Benchmark: whole-model time per image on the CPU, batch 1: yolov9-t and yolov9-s at
// 320 and 640 pixels, eval-mode forward (decoded outputs, no autograd) and train-mode forward +
// backward (sum of all raw head maps as the objective). Few iterations: one iteration is a full
// network pass; times are wall-clock (UseRealTime: the ops run on OpenMP threads). Counters:
// img/s and GFLOP/s (2 x analytic conv MACs of the unfused graph; forward+backward counts 3x the
// forward: data and weight gradients each cost about one forward). With YOLOV9_OFFICIAL set, the
// official PyTorch model is timed the same way in the same run (bench/official/model_speed.py)
// and the counters official_ms and speedup (official time / ours) are added.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

#include "bench/official_baseline.h"

#include "engine/autograd.h"
#include "graph/model.h"
#include "ops/ops.h"
#include "ops/reduce.h"

namespace {

using engine::Tensor;

const char* kModels[] = {"yolov9-t", "yolov9-s"};

// Model YAMLs: bench::config_dir ($YOLOV9_CONFIGS or the source tree's configs/models).
using bench::config_dir;

std::shared_ptr<graph::Model> make(int64_t m) {
  return graph::Model::from_yaml(config_dir() + "/" + kModels[m] + ".yaml");
}

// Official time per image (ms) for (model, img, key), measured once per process; 0 when absent.
double official_ms(int64_t m, int64_t img, const std::string& key) {
  static std::map<std::pair<int64_t, int64_t>, nlohmann::json> cache;
  auto k = std::make_pair(m, img);
  if (!cache.count(k)) {
    auto r = bench::run_official("model_speed.py",
                                 std::string(kModels[m]) + ".yaml " + std::to_string(img) + " --iters 2");
    cache[k] = r ? *r : nlohmann::json::object();
  }
  return cache[k].value(key, 0.0);
}

void add_baseline(benchmark::State& st, double ours_ms, const std::string& key) {
  double off = official_ms(st.range(0), st.range(1), key);
  if (off <= 0) return;
  st.counters["official_ms"] = off;
  st.counters["speedup"] = off / ours_ms;
}

void label(benchmark::State& st, const graph::Model& model, int64_t img, double passes) {
  st.SetLabel(std::string(kModels[st.range(0)]) + " @" + std::to_string(img));
  st.counters["img/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(passes * model.gflops(img, img), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_ModelForwardEval(benchmark::State& st) {
  auto model = make(st.range(0));
  const int64_t img = st.range(1);
  model->eval();
  Tensor x = Tensor::full({1, 3, img, img}, 0.5);
  engine::autograd::NoGradGuard ng;
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st) {
    auto out = model->forward(x);
    benchmark::DoNotOptimize(out.decoded.back().data_ptr());
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
              static_cast<double>(st.iterations());
  label(st, *model, img, 1.0);
  add_baseline(st, ms, "forward_ms");
}

void BM_ModelForwardBackward(benchmark::State& st) {
  auto model = make(st.range(0));
  const int64_t img = st.range(1);
  model->train();
  Tensor x = Tensor::full({1, 3, img, img}, 0.5);
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st) {
    auto out = model->forward(x);
    std::vector<Tensor> roots, grads;
    for (auto& br : out.raw)
      for (auto& r : br) {
        roots.push_back(r);
        grads.push_back(Tensor::ones(r.shape()));
      }
    engine::autograd::backward(roots, grads);
    for (auto& [n, p] : model->named_parameters())
      if (p.grad().defined()) benchmark::DoNotOptimize(p.grad().data_ptr());
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
              static_cast<double>(st.iterations());
  label(st, *model, img, 3.0);
  add_baseline(st, ms, "forward_backward_ms");
}

}  // namespace

BENCHMARK(BM_ModelForwardEval)->ArgsProduct({{0, 1}, {320, 640}})->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();
BENCHMARK(BM_ModelForwardBackward)->ArgsProduct({{0, 1}, {320, 640}})->Unit(benchmark::kMillisecond)->Iterations(2)->UseRealTime();
BENCHMARK_MAIN();
