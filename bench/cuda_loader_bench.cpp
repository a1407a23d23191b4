// Training-loader throughput with the augmentation on the CPU vs on the GPU (issue 12, item 5):
// mosaic at 640 px, batch 64, on a synthetic JPEG set (io::write_synth_dataset: 128 images of
// 640 px, written once to a temporary folder, so the kit needs no dataset). Cases:
//   BM_Loader640/aug:0/workers:N  --augment-device cpu: N workers decode and augment every sample
//                                 (N = every hardware thread, and 1)
//   BM_Loader640/aug:1/workers:N  --augment-device gpu: N workers decode the tiles into pinned
//                                 memory, next() uploads them and renders the batch on cuda:0
//                                 (one letterbox + one augment_warp launch); each iteration waits
//                                 for the device, so the rate includes the kernels
// Counter images/s (wall time). The GPU cases skip without a CUDA device; the CPU cases run
// anywhere. Run: build/cuda_loader_bench (or the kit's bin/cuda_loader_bench via run.sh).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/device.h"
#include "engine/tensor.h"
#include "io/data_yaml.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "io/synth.h"

namespace {

std::shared_ptr<io::AugmentedDataset> synthetic_640() {
  static std::shared_ptr<io::AugmentedDataset> ds = [] {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("y9_cuda_loader_bench_" + std::to_string(::getpid()));
    io::SynthOptions so;
    so.out_dir = dir.string();
    so.n_train = 128;
    so.n_val = 1;
    so.img_size = 640;
    so.seed = 0;
    io::write_synth_dataset(so);
    auto cfg = io::load_data_yaml((dir / "data.yaml").string());
    io::ScanOptions sc;
    sc.use_cache = false;
    auto scan = io::scan_dataset(cfg.train, sc);
    io::AugmentOptions o;
    o.img_size = 640;
    o.seed = 0;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                      ("y9_cuda_loader_bench_" + std::to_string(::getpid())),
                                  ec);
    });
    return std::make_shared<io::AugmentedDataset>(scan.records, o);
  }();
  return ds;
}

void BM_Loader640(benchmark::State& state) {
  const bool gpu = state.range(0) != 0;
  if (gpu && (!engine::cuda_compiled() || engine::cuda_device_count() == 0)) {
    state.SkipWithError("no CUDA device visible");
    return;
  }
  auto ds = synthetic_640();
  io::LoaderOptions o;
  o.batch_size = 64;
  o.workers = static_cast<int>(state.range(1));
  if (gpu) {
    o.augment_device = io::LoaderOptions::AugmentDevice::Gpu;
    o.device = engine::Device::cuda(0);
  }
  io::DataLoader dl(ds, o);
  int64_t images = 0, epoch = 0;
  dl.start_epoch(0);
  io::Batch b;
  for (auto _ : state) {
    if (!dl.next(b)) {
      dl.start_epoch(static_cast<int>(++epoch));
      dl.next(b);
    }
    if (gpu) engine::backend(o.device.type).context(o.device).synchronize();
    images += b.images.size(0);
  }
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(images), benchmark::Counter::kIsRate);
}

void loader_args(benchmark::internal::Benchmark* b) {
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int aug : {0, 1})
    for (int w : {1, all}) {
      b->Args({aug, w});
      if (all == 1) break;
    }
}
BENCHMARK(BM_Loader640)->Apply(loader_args)->ArgNames({"aug", "workers"})->Unit(benchmark::kMillisecond)
    ->UseRealTime()->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
