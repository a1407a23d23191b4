// End-to-end validation time on coco128 (issue 12, item 5): training::run_validation, the loop
// `yolov9 val` runs (loader with rect batches of 32 at 640, letterbox, forward, NMS at conf 0.001 /
// IoU 0.7, metrics; no plots, no files), on the CPU, on cuda:0 in FP32 and on cuda:0 with --half
// (FP16 autocast). Counters: images/s of the whole call, and the official per-image split
// pre_ms / inf_ms / nms_ms (val_dual.py's speed line). The CUDA cases skip without a device (the
// GPU kit runs them, docs/gpu_kit.md).
// Data: $YOLOV9_COCO128 or ../shared/data/coco128 (its val split, read without writing a label
// cache into the shared folder); skips when absent. Model: $Y9_VAL_BENCH_CFG (default yolov9-s)
// from configs/models, randomly initialised (the timing does not depend on the weights except
// through the number of NMS candidates, which conf 0.001 keeps near max_nms for a fresh model).
// Env: Y9_VAL_BENCH_BATCH (default 32), Y9_VAL_BENCH_WORKERS (default: all cores).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "apps/training/evaluator.h"
#include "bench/official_baseline.h"
#include "engine/backend.h"
#include "engine/device.h"
#include "graph/model.h"
#include "io/data_yaml.h"
#include "io/dataset.h"

namespace {

using bench::env_or;

std::string coco128_dir() { return env_or("YOLOV9_COCO128", "../shared/data/coco128"); }

using bench::config_dir;

int batch_size() { return std::clamp(std::atoi(env_or("Y9_VAL_BENCH_BATCH", "32").c_str()), 1, 1024); }

/// coco128's val split as make_val_dataset builds it (rect batches, pad 0.5), without a cache file.
std::shared_ptr<io::AugmentedDataset> coco128_val() {
  static std::shared_ptr<io::AugmentedDataset> ds = []() -> std::shared_ptr<io::AugmentedDataset> {
    const std::string yaml = coco128_dir() + "/coco128.yaml";
    if (!std::filesystem::exists(yaml)) return nullptr;
    const io::DataConfig cfg = io::load_data_yaml(yaml);
    io::ScanOptions so;
    so.use_cache = false;  // never write into the shared data folder
    so.nc = cfg.nc;
    so.min_image_px = 0;
    io::ScanResult scan = io::scan_dataset(cfg.val, so);
    io::AugmentOptions ao;
    ao.img_size = 640;
    ao.augment = false;
    ao.rect = true;
    ao.batch_size = batch_size();
    ao.rect_pad = 0.5;
    ao.seed = 0;
    return std::make_shared<io::AugmentedDataset>(std::move(scan.records), ao);
  }();
  return ds;
}

/// range(0): 0 CPU, 1 cuda:0 FP32, 2 cuda:0 --half.
void BM_ValCoco128(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  if (mode > 0 && (!engine::cuda_compiled() || engine::cuda_device_count() == 0)) {
    state.SkipWithError("no CUDA device visible");
    return;
  }
  auto ds = coco128_val();
  if (!ds) {
    state.SkipWithError("coco128 not found (set YOLOV9_COCO128)");
    return;
  }
  const std::string cfg = env_or("Y9_VAL_BENCH_CFG", "yolov9-s");
  auto model = graph::Model::from_yaml(config_dir() + "/" + cfg + ".yaml");
  training::ValOptions o;
  o.batch_size = batch_size();
  o.workers = std::max(1, std::atoi(env_or("Y9_VAL_BENCH_WORKERS",
                                           std::to_string(std::max(1u, std::thread::hardware_concurrency())))
                                        .c_str()));
  o.plots = false;
  o.print = false;
  if (mode > 0) {
    o.device = engine::Device::cuda(0);
    model->to(o.device);
    if (mode == 2) o.autocast = engine::DType::F16;
  }
  training::ValResult r;
  int64_t images = 0;
  for (auto _ : state) {
    r = training::run_validation(*model, ds, o);
    images += r.seen;
  }
  state.SetLabel(cfg + " @640 b" + std::to_string(o.batch_size) + (mode == 0 ? " cpu" : mode == 1 ? " cuda:0" : " cuda:0 half"));
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(images), benchmark::Counter::kIsRate);
  state.counters["pre_ms"] = r.pre_ms;
  state.counters["inf_ms"] = r.inf_ms;
  state.counters["nms_ms"] = r.nms_ms;
}
BENCHMARK(BM_ValCoco128)->DenseRange(0, 2)->ArgName("device")->Unit(benchmark::kSecond)->UseRealTime()->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
