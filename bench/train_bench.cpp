// One training epoch of yolov9-t at 320 px on coco128 on the CPU (batch 16, from scratch), as the
// `yolov9 train` program runs it end to end (data loading, forward, loss, backward, optimizer,
// EMA, validation, checkpoints). With YOLOV9_OFFICIAL set, the official train_dual.py is timed
// the same way in the same run (bench/official/train_epoch.py): counters official_s and speedup.
// Slow (minutes): one iteration. Needs $YOLOV9_COCO128 or ../shared/data/coco128 and the built
// program next to this benchmark.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "bench/official_baseline.h"

namespace fs = std::filesystem;

namespace {

std::string coco128_dir() {
  const char* env = std::getenv("YOLOV9_COCO128");
  return fs::absolute(env ? env : "../shared/data/coco128").string();
}

// A folder of symlinks to the dataset, so that the label cache and runs land there.
std::string staged_dataset() {
  fs::path tmp = fs::temp_directory_path() / ("y9_train_bench_" + std::to_string(::getpid()));
  for (const char* sub : {"images", "labels"}) {
    fs::create_directories(tmp / sub);
    if (!fs::exists(tmp / sub / "train2017"))
      fs::create_directory_symlink(fs::path(coco128_dir()) / sub / "train2017", tmp / sub / "train2017");
  }
  fs::copy_file(fs::path(coco128_dir()) / "coco128.yaml", tmp / "coco128.yaml", fs::copy_options::overwrite_existing);
  return tmp.string();
}

void BM_TrainEpochYolov9tCoco128(benchmark::State& state) {
  const int64_t img = state.range(0);
  if (!fs::exists(fs::path(coco128_dir()) / "coco128.yaml")) {
    state.SkipWithError("coco128 not found (set YOLOV9_COCO128)");
    return;
  }
  const std::string data = staged_dataset();
  const std::string bin = std::string(Y9_BENCH_BINARY_DIR) + "/yolov9";
  const std::string cmd = bin + " train --cfg yolov9-t.yaml --data " + data + "/coco128.yaml --img " +
                          std::to_string(img) + " --batch 16 --epochs 1 --weights '' --workers 2 --project " + data +
                          "/runs --name exp --exist-ok > " + data + "/train.log 2>&1";
  double seconds = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    int rc = std::system(cmd.c_str());
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rc != 0) {
      state.SkipWithError(("yolov9 train failed; see " + data + "/train.log").c_str());
      return;
    }
  }
  state.counters["ours_s"] = seconds;
  auto off = bench::run_official("train_epoch.py", coco128_dir() + " --cfg yolov9-t.yaml --img " +
                                                       std::to_string(img) + " --batch 16 --epochs 1 --workers 2");
  if (off && off->value("seconds_per_epoch", 0.0) > 0) {
    state.counters["official_s"] = (*off)["seconds_per_epoch"].get<double>();
    state.counters["speedup"] = (*off)["seconds_per_epoch"].get<double>() / seconds;
  }
  fs::remove_all(data);
}
BENCHMARK(BM_TrainEpochYolov9tCoco128)->Arg(320)->ArgName("img")->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
