// Google Benchmark: whole-model time per image on the CPU, batch 1: yolov9-t and yolov9-s at
// 320 and 640 pixels, eval-mode forward (decoded outputs, no autograd) and train-mode forward +
// backward (sum of all raw head maps as the objective). Few iterations: one iteration is a full
// network pass; times are wall-clock (UseRealTime: the ops run on OpenMP threads). Counters:
// img/s and GFLOP/s (2 x analytic conv MACs of the unfused graph; forward+backward counts 3x the
// forward: data and weight gradients each cost about one forward).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "engine/autograd.h"
#include "graph/model.h"
#include "ops/ops.h"
#include "ops/reduce.h"

namespace {

using engine::Tensor;

const char* kModels[] = {"yolov9-t", "yolov9-s"};

// Model YAMLs: $YOLOV9_CONFIGS, else configs/models under the source tree (when the build
// defines Y9_SOURCE_DIR) or the current directory.
std::string config_dir() {
  if (const char* e = std::getenv("YOLOV9_CONFIGS")) return e;
#ifdef Y9_SOURCE_DIR
  return std::string(Y9_SOURCE_DIR) + "/configs/models";
#else
  return "configs/models";
#endif
}

std::shared_ptr<graph::Model> make(int64_t m) {
  return graph::Model::from_yaml(config_dir() + "/" + kModels[m] + ".yaml");
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
  for (auto _ : st) {
    auto out = model->forward(x);
    benchmark::DoNotOptimize(out.decoded.back().data_ptr());
  }
  label(st, *model, img, 1.0);
}

void BM_ModelForwardBackward(benchmark::State& st) {
  auto model = make(st.range(0));
  const int64_t img = st.range(1);
  model->train();
  Tensor x = Tensor::full({1, 3, img, img}, 0.5);
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
  label(st, *model, img, 3.0);
}

}  // namespace

BENCHMARK(BM_ModelForwardEval)->ArgsProduct({{0, 1}, {320, 640}})->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();
BENCHMARK(BM_ModelForwardBackward)->ArgsProduct({{0, 1}, {320, 640}})->Unit(benchmark::kMillisecond)->Iterations(2)->UseRealTime();
BENCHMARK_MAIN();
