// Google Benchmark: per-call overhead of CPU inference (issue 15, measurement (d)): the time per
// image of `yolov9 detect` at batch 1 against `yolov9 val` at batch 32, for gelan-t at 128 px and
// yolov9-s at 640 px, FP32, 2 threads (Y9_OVERHEAD_THREADS). Both models are built from their YAML
// with random weights and fused (graph::fuse, as the stand-alone detect and val load them).
//   BM_ValBatch32/m   one [32, 3, S, S] input: the predictor (eval forward, main branch) and
//                     non_max_suppression at val's thresholds (conf 0.001, IoU 0.7, multi-label);
//                     time per image = iteration time / 32.
//   BM_DetectBatch1/m one 640 x 480 BGR uint8 image through training::detect_image, the whole
//                     detect pipeline (letterbox, BGR -> RGB planes / 255, the predictor, NMS at
//                     detect's thresholds, boxes back to the image); counter batch1_over_batch32 =
//                     this time / BM_ValBatch32's time per image of the same model (run first);
//                     model_ms and nms_ms: the model's and NMS's parts of it (ImageDetections).
// ms_per_image is the median over the iterations (each timed apart: a preemption by another process
// on a shared host moves one iteration, not the result), mean_ms_per_image the mean.
// Both count sys_allocs_per_pass: allocations per iteration that reached the system (the CPU
// allocator's misses; engine/allocator.h), small ones included; the predictor's inference arena
// (engine/cpu_cache.h) makes that 0 once warm while its cap holds a pass's freed blocks.
// arena_cached_MiB: the bytes the arena holds unused after the last pass.
// Env: Y9_OVERHEAD_THREADS (default 2), Y9_OVERHEAD_ITERS (batch-1 iterations, default 20; the
// batch-32 runs take max(3, that / 10) for gelan-t, max(1, that / 10) for yolov9-s).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "apps/training/detector.h"
#include "apps/training/predictor.h"
#include "bench/official_baseline.h"
#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/tensor.h"
#include "graph/fuse.h"
#include "graph/model.h"
#include "io/letterbox.h"
#include "ops/nms.h"
#include "ops/ops.h"

namespace {

using engine::Tensor;

struct ModelCase {
  const char* yaml;
  int imgsz;
};
const ModelCase kModels[] = {{"gelan-t", 128}, {"yolov9-s", 640}};
constexpr int64_t kValBatch = 32;

int positive_env(const char* name, const char* fallback) { return bench::positive_env("overhead_bench", name, fallback); }
int threads() { return positive_env("Y9_OVERHEAD_THREADS", "2"); }
int iters() { return positive_env("Y9_OVERHEAD_ITERS", "20"); }

/// The fused model of case m, built once per process.
graph::Model& model(int64_t m) {
  static std::map<int64_t, std::shared_ptr<graph::Model>> cache;
  auto& p = cache[m];
  if (!p) {
    p = graph::Model::from_yaml(bench::config_dir() + "/" + kModels[m].yaml + ".yaml");
    graph::fuse(*p);
    p->eval();
  }
  return *p;
}

std::map<int64_t, double> g_val_ms_per_image;

/// Per-iteration times, in ms per image.
class IterationTimes {
 public:
  /// Records the iteration that started at t0 (now - t0), over `images` images.
  void add(std::chrono::steady_clock::time_point t0, double images) {
    ms_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / images);
  }
  double median() const {
    std::vector<double> v = ms_;
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
  }
  double mean() const { return ms_.empty() ? 0 : std::accumulate(ms_.begin(), ms_.end(), 0.0) / static_cast<double>(ms_.size()); }

 private:
  std::vector<double> ms_;
};

std::string label(int64_t m, int64_t batch) {
  return std::string(kModels[m].yaml) + " fused @" + std::to_string(kModels[m].imgsz) + ", batch " +
         std::to_string(batch) + ", " + std::to_string(threads()) + " threads";
}

void BM_ValBatch32(benchmark::State& st) {
  const int64_t m = st.range(0);
  omp_set_num_threads(threads());
  const int s = kModels[m].imgsz;
  const training::Predictor predictor = training::model_predictor(model(m));
  const Tensor x = Tensor::full({kValBatch, 3, s, s}, 0.5);
  ops::NmsOptions nms;  // val: conf 0.001, IoU 0.7, multi-label, max_det 300
  nms.conf_thres = 0.001;
  nms.iou_thres = 0.7;
  nms.multi_label = true;
  nms.max_det = 300;
  const io::Batch batch;
  benchmark::DoNotOptimize(ops::non_max_suppression(predictor(x, batch), nms).size());  // warm-up
  const int64_t misses0 = engine::cpu_allocator()->stats().num_misses;
  IterationTimes times;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(ops::non_max_suppression(predictor(x, batch), nms).size());
    times.add(t0, static_cast<double>(kValBatch));
  }
  const double ms = times.median();
  g_val_ms_per_image[m] = ms;
  st.counters["ms_per_image"] = ms;
  st.counters["mean_ms_per_image"] = times.mean();
  st.counters["sys_allocs_per_pass"] = static_cast<double>(engine::cpu_allocator()->stats().num_misses - misses0) /
                                       static_cast<double>(st.iterations());
  st.counters["arena_cached_MiB"] = static_cast<double>(engine::cpu_allocator()->stats().cached_bytes) / (1 << 20);
  st.SetLabel(label(m, kValBatch));
}

void BM_DetectBatch1(benchmark::State& st) {
  const int64_t m = st.range(0);
  omp_set_num_threads(threads());
  const training::Predictor predictor = training::model_predictor(model(m));
  cv::Mat im0(480, 640, CV_8UC3);
  cv::randu(im0, cv::Scalar::all(0), cv::Scalar::all(256));
  ops::NmsOptions nms;  // detect: conf 0.25, IoU 0.45, one label per box, max_det 1000
  nms.conf_thres = 0.25;
  nms.iou_thres = 0.45;
  nms.multi_label = false;
  nms.max_det = 1000;
  io::opencv_single_threaded();  // as `yolov9 detect` (training::run_detect) runs
  for (int i = 0; i < 2; ++i)  // warm-up: oneDNN primitives, buffers
    benchmark::DoNotOptimize(training::detect_image(predictor, im0, nms, kModels[m].imgsz, engine::Device::cpu()).h);
  const int64_t misses0 = engine::cpu_allocator()->stats().num_misses;
  double inf_s = 0, nms_s = 0;
  IterationTimes times;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    const training::ImageDetections r = training::detect_image(predictor, im0, nms, kModels[m].imgsz, engine::Device::cpu());
    times.add(t0, 1.0);
    inf_s += r.inf_s;
    nms_s += r.nms_s;
  }
  const double n = static_cast<double>(st.iterations());
  const double ms = times.median();
  st.counters["ms_per_image"] = ms;
  st.counters["mean_ms_per_image"] = times.mean();
  // The model's and NMS's shares (ImageDetections::inf_s, nms_s); the rest is the letterbox and
  // the conversion to RGB planes.
  st.counters["model_ms"] = inf_s * 1e3 / n;
  st.counters["nms_ms"] = nms_s * 1e3 / n;
  st.counters["sys_allocs_per_pass"] = static_cast<double>(engine::cpu_allocator()->stats().num_misses - misses0) /
                                       static_cast<double>(st.iterations());
  st.counters["arena_cached_MiB"] = static_cast<double>(engine::cpu_allocator()->stats().cached_bytes) / (1 << 20);
  if (auto it = g_val_ms_per_image.find(m); it != g_val_ms_per_image.end())
    st.counters["batch1_over_batch32"] = ms / it->second;
  st.SetLabel(label(m, 1));
}

/// The fixed cost of one op at batch 1 (issue 15 (d)): the time per call of ops that do almost no
/// arithmetic, on the blocked layout of a batch-1 inference pass. range(0): 0 a 1x1 convolution +
/// bias + SiLU, 16 -> 16 channels on a 1x1 map (one oneDNN primitive); 1 the same, 3x3 on 4x3 (the
/// smallest of gelan-t's RepNBottleneck convolutions at 128 px); 2 a residual add of [1, 16, 4, 3]
/// blocked maps; range(1): threads. Counter us_per_call.
void BM_PerOpOverhead(benchmark::State& st) {
  const int64_t op = st.range(0);
  omp_set_num_threads(static_cast<int>(st.range(1)));
  engine::autograd::NoGradGuard ng;
  const int64_t c = 16, h = op == 0 ? 1 : 4, w = op == 0 ? 1 : 3, k = op == 1 ? 3 : 1;
  const Tensor x = ops::to_blocked(Tensor::full({1, c, h, w}, 0.25), 16);
  const Tensor wt = Tensor::full({c, c, k, k}, 0.01), b = Tensor::full({c}, 0.1);
  const auto call = [&] {
    if (op == 2) return ops::add(x, x);
    return ops::conv2d_blocked(x, wt, b, {1, 1}, {k / 2, k / 2}, {1, 1}, 1, true, 16);
  };
  benchmark::DoNotOptimize(call().data_ptr());  // warm-up: the primitive
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st) benchmark::DoNotOptimize(call().data_ptr());
  st.counters["us_per_call"] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                               static_cast<double>(st.iterations());
  static const char* const kNames[] = {"conv 1x1 + SiLU, 16 ch, 1x1 map", "conv 3x3 + SiLU, 16 ch, 4x3 map",
                                       "add, 16 ch, 4x3 map"};
  st.SetLabel(std::string(kNames[op]) + ", " + std::to_string(st.range(1)) + " threads");
}

void apply(benchmark::internal::Benchmark* b, int n) {
  b->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(n);
}

}  // namespace

// Batch 32 first: the batch-1 benchmark of the same model reads its time per image.
// (one registration per model: the iteration count is per registration)
BENCHMARK(BM_ValBatch32)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(std::max(3, iters() / 10));
BENCHMARK(BM_ValBatch32)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(std::max(1, iters() / 10));
BENCHMARK(BM_DetectBatch1)->Apply([](auto* b) { apply(b, iters()); });
BENCHMARK(BM_PerOpOverhead)->ArgsProduct({{0, 1, 2}, {1, 2}})->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_MAIN();
