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
//                     this time / BM_ValBatch32's time per image of the same model (run first).
// Both count sys_allocs_per_pass: allocations per iteration that reached the system (the CPU
// allocator's misses; engine/allocator.h), small ones included; the predictor's inference arena
// (engine/cpu_cache.h) makes that 0 once warm while its cap holds a pass's freed blocks.
// arena_cached_MiB: the bytes the arena holds unused after the last pass.
// Env: Y9_OVERHEAD_THREADS (default 2), Y9_OVERHEAD_ITERS (batch-1 iterations, default 20; the
// batch-32 runs take max(1, that / 10)).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include <opencv2/core.hpp>

#include "apps/training/detector.h"
#include "apps/training/predictor.h"
#include "bench/official_baseline.h"
#include "engine/allocator.h"
#include "engine/tensor.h"
#include "graph/fuse.h"
#include "graph/model.h"
#include "ops/nms.h"

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
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st) benchmark::DoNotOptimize(ops::non_max_suppression(predictor(x, batch), nms).size());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                    static_cast<double>(st.iterations()) / static_cast<double>(kValBatch);
  g_val_ms_per_image[m] = ms;
  st.counters["ms_per_image"] = ms;
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
  for (int i = 0; i < 2; ++i)  // warm-up: oneDNN primitives, buffers
    benchmark::DoNotOptimize(training::detect_image(predictor, im0, nms, kModels[m].imgsz, engine::Device::cpu()).h);
  const int64_t misses0 = engine::cpu_allocator()->stats().num_misses;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st)
    benchmark::DoNotOptimize(training::detect_image(predictor, im0, nms, kModels[m].imgsz, engine::Device::cpu()).h);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                    static_cast<double>(st.iterations());
  st.counters["ms_per_image"] = ms;
  st.counters["sys_allocs_per_pass"] = static_cast<double>(engine::cpu_allocator()->stats().num_misses - misses0) /
                                       static_cast<double>(st.iterations());
  st.counters["arena_cached_MiB"] = static_cast<double>(engine::cpu_allocator()->stats().cached_bytes) / (1 << 20);
  if (auto it = g_val_ms_per_image.find(m); it != g_val_ms_per_image.end())
    st.counters["batch1_over_batch32"] = ms / it->second;
  st.SetLabel(label(m, 1));
}

void apply(benchmark::internal::Benchmark* b, int n) {
  b->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(n);
}

}  // namespace

// Batch 32 first: the batch-1 benchmark of the same model reads its time per image.
BENCHMARK(BM_ValBatch32)->Apply([](auto* b) { apply(b, std::max(1, iters() / 10)); });
BENCHMARK(BM_DetectBatch1)->Apply([](auto* b) { apply(b, iters()); });

BENCHMARK_MAIN();
