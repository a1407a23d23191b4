// One training epoch of yolov9-t at 320 px on coco128 on the CPU (batch 16, from scratch), as the
// `yolov9 train` program runs it end to end (data loading, forward, loss, backward, optimizer,
// EMA, validation, checkpoints). With YOLOV9_OFFICIAL set, the official train_dual.py is timed
// the same way in the same run (bench/official/train_epoch.py): counters official_s and speedup.
// Slow (minutes): one iteration. Needs $YOLOV9_COCO128 or ../shared/data/coco128 and the built
// program next to this benchmark.
// On a CPU with native BF16 it also runs the epoch with --amp bf16: ours_bf16_s, speedup_bf16.
// BM_TrainStep (issue 15, measurement (b)): the training step of yolov9-s at 640 px, batch 8, in ms
// per image: `yolov9 train --benchmark 5 --benchmark-data synthetic` (3 warm-up steps, 5 timed, one
// coco128 batch repeated; with accumulate 8 the timed steps hold one optimizer step + EMA) against
// bench/official/train_step.py (train_dual.py's step on one batch of the official loader, the same
// step counts) in the same run. Counters ours_ms_per_image, official_ms_per_image, speedup, and the
// peak resident memory of each process (ours_peak_rss_gb: VmHWM; official_peak_rss_gb: ru_maxrss).
// On a CPU with native BF16 ours also runs with --amp bf16 (BF16 convolutions, an extension: the
// official CPU step is FP32): ours_bf16_ms_per_image, ours_bf16_peak_rss_gb, speedup_bf16.
// BM_SmallModel3Epochs (issue 15, measurement (e)): 3 epochs of gelan-t at 128 px, batch 16, on a
// 256-image `yolov9 synth` set (64 val images), ours (`yolov9 train`) against the official train.py
// in the same run; shared:0 on the machine as it is, shared:1 beside one competing CPU-bound
// process (a busy loop at nice Y9_COMPETITOR_NICE, default 10, the example) that runs for
// both programs; auto:1 runs ours with --cpu-threads auto (apps/training/cpu_threads.h). The
// official program runs once per shared value. Counters: ours_s, official_s, speedup; the shared
// runs add ours_slowdown and official_slowdown (their time / the quiet run's of the same auto).
// bf16:1 runs ours with --amp bf16 (BF16 convolutions, on a CPU with native BF16 only).
#include <benchmark/benchmark.h>

#include <chrono>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

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

/// Whether `yolov9 train --amp bf16` runs BF16 convolutions on this CPU (`yolov9 info --backends`
/// says so; asked once): the BF16 runs are skipped, not timed, where it would train in FP32.
bool cpu_bf16() {
  static const bool yes = [] {
    const std::string cmd = std::string(Y9_BENCH_BINARY_DIR) +
                            "/yolov9 info --backends 2>/dev/null | grep -q 'BF16 convolutions (train --amp bf16): yes'";
    return std::system(cmd.c_str()) == 0;
  }();
  return yes;
}

/// The contents of the file at `path` (empty when it cannot be read).
std::string read_text(const std::string& path) {
  std::string all;
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return all;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) all.append(buf, n);
  std::fclose(f);
  return all;
}

/// Whether the file at `path` contains `text`.
bool file_contains(const std::string& path, const std::string& text) {
  return read_text(path).find(text) != std::string::npos;
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
  // The same epoch with --amp bf16 (BF16 convolutions), on a CPU with native BF16 only (its notice).
  double bf16 = 0;
  if (cpu_bf16()) {
    const std::string log = data + "/train_bf16.log";
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = std::system((bin + " train --cfg yolov9-t.yaml --data " + data + "/coco128.yaml --img " +
                                std::to_string(img) + " --batch 16 --epochs 1 --weights '' --workers 2 --project " +
                                data + "/runs --name exp_bf16 --exist-ok --amp bf16 > " + log + " 2>&1")
                                   .c_str());
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rc == 0 && file_contains(log, "convolutions in BF16")) bf16 = t;
  }
  if (bf16 > 0) state.counters["ours_bf16_s"] = bf16;
  auto off = bench::run_official("train_epoch.py", coco128_dir() + " --cfg yolov9-t.yaml --img " +
                                                       std::to_string(img) + " --batch 16 --epochs 1 --workers 2");
  if (off && off->value("seconds_per_epoch", 0.0) > 0) {
    state.counters["official_s"] = (*off)["seconds_per_epoch"].get<double>();
    state.counters["speedup"] = (*off)["seconds_per_epoch"].get<double>() / seconds;
    if (bf16 > 0) state.counters["speedup_bf16"] = (*off)["seconds_per_epoch"].get<double>() / bf16;
  }
  fs::remove_all(data);
}
BENCHMARK(BM_TrainEpochYolov9tCoco128)->Arg(320)->ArgName("img")->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

/// The number after `key` in `text` (0 when absent).
double number_after(const std::string& text, const std::string& key) {
  const size_t k = text.find(key);
  return k == std::string::npos ? 0.0 : std::strtod(text.c_str() + k + key.size(), nullptr);
}

void BM_TrainStep(benchmark::State& state) {
  if (!fs::exists(fs::path(coco128_dir()) / "coco128.yaml")) {
    state.SkipWithError("coco128 not found (set YOLOV9_COCO128)");
    return;
  }
  constexpr int kBatch = 8, kImg = 640, kSteps = 5;
  const std::string data = staged_dataset();
  // One `yolov9 train --benchmark` run with `extra` flags: its log's text (empty when it failed).
  auto run_ours = [&](const std::string& extra, const std::string& name) {
    const std::string log = data + "/" + name + ".log";
    const std::string cmd = std::string(Y9_BENCH_BINARY_DIR) + "/yolov9 train --cfg yolov9-s.yaml --data " + data +
                            "/coco128.yaml --img " + std::to_string(kImg) + " --batch " + std::to_string(kBatch) +
                            " --epochs 1 --weights '' --workers 2 --benchmark " + std::to_string(kSteps) +
                            " --benchmark-data synthetic --project " + data + "/runs --name " + name +
                            " --exist-ok" + extra + " > " + log + " 2>&1";
    return std::system(cmd.c_str()) == 0 ? read_text(log) : std::string();
  };
  std::string text, bf16;
  for (auto _ : state) {
    text = run_ours("", "exp");
    // --amp bf16: the convolutions in BF16 where the CPU has native BF16 (ops/autocast.h); its
    // report then says "(BF16 convolutions)", else the run was FP32 and is not reported.
    if (cpu_bf16()) bf16 = run_ours(" --amp bf16", "exp_bf16");
  }
  const double ms_step = number_after(text, "img/s, ");
  if (ms_step <= 0) {
    state.SkipWithError(("yolov9 train --benchmark failed or did not report; see " + data + "/exp.log").c_str());
    return;
  }
  const double ours = ms_step / kBatch;
  state.counters["ours_ms_per_image"] = ours;
  state.counters["ours_peak_rss_gb"] = number_after(text, "), process ");
  double ours_bf16 = 0;
  if (bf16.find("(BF16 convolutions)") != std::string::npos && number_after(bf16, "img/s, ") > 0) {
    ours_bf16 = number_after(bf16, "img/s, ") / kBatch;
    state.counters["ours_bf16_ms_per_image"] = ours_bf16;
    state.counters["ours_bf16_peak_rss_gb"] = number_after(bf16, "), process ");
  }
  auto off = bench::run_official("train_step.py", coco128_dir() + " --cfg yolov9-s.yaml --img " +
                                                      std::to_string(kImg) + " --batch " + std::to_string(kBatch) +
                                                      " --steps " + std::to_string(kSteps) + " --warmup 3");
  if (off && off->value("ms_per_image", 0.0) > 0) {
    state.counters["official_ms_per_image"] = (*off)["ms_per_image"].get<double>();
    state.counters["official_peak_rss_gb"] = off->value("peak_rss_gb", 0.0);
    state.counters["speedup"] = (*off)["ms_per_image"].get<double>() / ours;
    if (ours_bf16 > 0) state.counters["speedup_bf16"] = (*off)["ms_per_image"].get<double>() / ours_bf16;
  }
  state.SetLabel("yolov9-s 640 batch 8");
  fs::remove_all(data);
}
BENCHMARK(BM_TrainStep)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

/// A CPU-bound busy loop in a child process at nice `nice`, killed by the destructor, or by the
/// kernel when this process dies first (PR_SET_PDEATHSIG), so no busy loop outlives a killed run.
class Competitor {
 public:
  explicit Competitor(long nice) : pid_(::fork()) {
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() == 1) ::_exit(0);  // the parent died before prctl
      ::setpriority(PRIO_PROCESS, 0, static_cast<int>(nice));
      volatile unsigned long x = 0;
      for (;;) x = x + 1;
    }
  }
  ~Competitor() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Competitor(const Competitor&) = delete;
  Competitor& operator=(const Competitor&) = delete;

 private:
  pid_t pid_;
};

// The synthetic set, made once per process (removed at exit).
const std::string& synth_dataset() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("y9_small_bench_" + std::to_string(::getpid()));
    const std::string cmd = std::string(Y9_BENCH_BINARY_DIR) + "/yolov9 synth --out " + (d / "synth").string() +
                            " --n-train 256 --n-val 64 --img 128 > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return std::string();
    std::atexit([] { fs::remove_all(fs::temp_directory_path() / ("y9_small_bench_" + std::to_string(::getpid()))); });
    return d.string();
  }();
  return dir;
}

std::map<std::string, double> g_quiet;   // "ours<auto>" / "official" seconds of the quiet runs
std::map<bool, nlohmann::json> g_official;  // the official result per shared value

void BM_SmallModel3Epochs(benchmark::State& state) {
  const bool shared = state.range(0) != 0;
  const bool auto_threads = state.range(1) != 0;
  const bool bf16 = state.range(2) != 0;
  const std::string ours_key = std::string("ours") + (auto_threads ? "_auto" : "") + (bf16 ? "_bf16" : "");
  const std::string root = synth_dataset();
  if (root.empty()) {
    state.SkipWithError("yolov9 synth failed");
    return;
  }
  const std::string data = root + "/synth/data.yaml";
  const std::string bin = std::string(Y9_BENCH_BINARY_DIR) + "/yolov9";
  const std::string tag = std::string(shared ? "shared" : "quiet") + (auto_threads ? "_auto" : "") + (bf16 ? "_bf16" : "");
  const std::string log = root + "/train_" + tag + ".log";
  const std::string cmd = bin + " train --cfg gelan-t.yaml --data " + data +
                          " --img 128 --batch 16 --epochs 3 --weights '' --workers 2 --project " + root + "/runs --name " +
                          tag + " --exist-ok" + (auto_threads ? " --cpu-threads auto" : "") + (bf16 ? " --amp bf16" : "") +
                          " > " + log + " 2>&1";
  if (bf16 && !cpu_bf16()) {
    state.SkipWithError("--amp bf16 would train in FP32 here: this CPU has no native BF16");
    return;
  }
  const std::string nice_s = bench::env_or("Y9_COMPETITOR_NICE", "10");
  char* end = nullptr;
  const long nice = std::strtol(nice_s.c_str(), &end, 10);
  if (nice_s.empty() || *end != '\0' || nice < 0 || nice > 19) {
    state.SkipWithError(("Y9_COMPETITOR_NICE must be an integer in 0..19, got '" + nice_s + "'").c_str());
    return;
  }
  double ours = 0;
  std::optional<nlohmann::json> off;
  for (auto _ : state) {
    std::optional<Competitor> competitor;
    if (shared) competitor.emplace(nice);
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = std::system(cmd.c_str());
    ours = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rc != 0) {
      state.SkipWithError(("yolov9 train failed; see " + log).c_str());
      return;
    }
    if (bf16 && !file_contains(log, "convolutions in BF16")) {  // the notice of resolve_amp_mode
      state.SkipWithError("--amp bf16 ran in FP32: this CPU has no native BF16");
      return;
    }
    if (g_official.count(shared)) {
      off = g_official[shared];
    } else {
      off = bench::run_official("train_epoch.py", "--data " + data +
                                                      " --script train.py --cfg gelan-t.yaml --img 128 --batch 16 "
                                                      "--epochs 3 --workers 2");
      if (off) g_official[shared] = *off;
    }
  }
  state.counters["ours_s"] = ours;
  if (!shared) g_quiet[ours_key] = ours;
  if (shared && g_quiet.count(ours_key)) state.counters["ours_slowdown"] = ours / g_quiet[ours_key];
  if (off && off->value("seconds", 0.0) > 0) {
    const double o = (*off)["seconds"].get<double>();
    state.counters["official_s"] = o;
    state.counters["speedup"] = o / ours;
    if (!shared) g_quiet["official"] = o;
    if (shared && g_quiet.count("official")) state.counters["official_slowdown"] = o / g_quiet["official"];
  }
  state.SetLabel((shared ? "beside a busy loop at nice " + std::to_string(nice) : std::string("quiet")) +
                 (auto_threads ? ", --cpu-threads auto" : "") + (bf16 ? ", --amp bf16" : ""));
}
BENCHMARK(BM_SmallModel3Epochs)
    ->Args({0, 0, 0})
    ->Args({1, 0, 0})
    ->Args({0, 1, 0})
    ->Args({1, 1, 0})
    ->Args({0, 0, 1})
    ->Args({1, 0, 1})
    ->ArgNames({"shared", "auto", "bf16"})
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
