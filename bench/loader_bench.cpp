// Training-loader throughput on coco128: images/s with mosaic at 640, batch 16, 1 and 2 workers
// Needs $YOLOV9_COCO128 or ../shared/data/coco128. With YOLOV9_OFFICIAL set, the official loader
// is timed the same way in the same run (bench/official/loader_speed.py): counters
// official_images/s and speedup (ours / official, per worker count). The loader turns OpenCV's
// own threading off (as the official dataloaders.py does), so "1 worker" is one thread.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "io/data_yaml.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "bench/official_baseline.h"

namespace {

std::string coco128_dir() {
  const char* env = std::getenv("YOLOV9_COCO128");
  return env ? env : "../shared/data/coco128";
}

std::shared_ptr<io::AugmentedDataset> coco128_dataset() {
  static std::shared_ptr<io::AugmentedDataset> ds = [] {
    std::string dir = coco128_dir();
    if (!std::filesystem::exists(dir + "/coco128.yaml")) return std::shared_ptr<io::AugmentedDataset>();
    auto cfg = io::load_data_yaml(dir + "/coco128.yaml");
    io::ScanOptions so;
    so.use_cache = false;  // never write into the shared data folder
    auto scan = io::scan_dataset(cfg.train, so);
    io::AugmentOptions o;
    o.img_size = 640;
    o.seed = 0;
    return std::make_shared<io::AugmentedDataset>(scan.records, o);
  }();
  return ds;
}

void BM_TrainLoaderMosaic640(benchmark::State& state) {
  auto ds = coco128_dataset();
  if (!ds) {
    state.SkipWithError("coco128 not found (set YOLOV9_COCO128)");
    return;
  }
  io::LoaderOptions o;
  o.batch_size = 16;
  o.workers = static_cast<int>(state.range(0));
  io::DataLoader dl(ds, o);
  int64_t images = 0, epoch = 0;
  dl.start_epoch(0);
  io::Batch b;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (!dl.next(b)) {
      dl.start_epoch(static_cast<int>(++epoch));
      dl.next(b);
    }
    images += b.images.size(0);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(images), benchmark::Counter::kIsRate);
  auto off = bench::run_official("loader_speed.py", std::filesystem::absolute(coco128_dir()).string() +
                                                        " --img 640 --batch 16 --workers " + std::to_string(o.workers));
  if (off && off->value("images_per_s", 0.0) > 0) {
    const double theirs = (*off)["images_per_s"].get<double>();
    state.counters["official_images/s"] = theirs;
    // Ours (images per second of wall time over the timed iterations) over the official rate.
    state.counters["speedup"] = static_cast<double>(images) / seconds / theirs;
  }
}
BENCHMARK(BM_TrainLoaderMosaic640)->Arg(1)->Arg(2)->ArgName("workers")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

}  // namespace

BENCHMARK_MAIN();
