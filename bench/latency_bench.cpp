// Google Benchmark: CPU inference latency of converted official checkpoints (issue 14): batch 1,
// 640 x 640, FP32, 2 threads (Y9_LATENCY_THREADS), model forward only (no letterbox, no NMS).
// In the same run, as baselines on the same files:
//   ort_ms    onnxruntime (CPUExecutionProvider) on our ONNX export of the checkpoint
//   cvdnn_ms  OpenCV DNN (readNetFromONNX) on that ONNX file
//   torch_ms  the official model on PyTorch CPU, loaded as detect_dual.py loads it (fused)
// with the ratios <baseline>_ms / ours (> 1: ours is faster). A baseline whose interpreter or
// module is missing is left out (bench/official/latency.py runs them; see bench/official/README.md).
//
// Models (Y9_LATENCY_DIR, default <build>/latency): yolov9-s-converted.pt and gelan-s-converted.pt,
// made once by bench/official/make_converted.py with the official code (YOLOV9_OFFICIAL). Without
// it, randomly initialised gelan-s safetensors stand in (same graph: yolov9-s-converted is gelan-s),
// and the torch column is skipped. The ONNX files come from `yolov9 export --format onnx`.
// Ours: the checkpoint loaded as `yolov9 detect` loads it, then graph::fuse (Conv+BN, RepConvN), as
// the official detect fuses; eval forward under NoGradGuard.
// Env: Y9_LATENCY_ITERS (timed passes, default 10), Y9_LATENCY_THREADS (default 2), YOLOV9_PYTHON
// (interpreter with torch and cv2, default /usr/bin/python3), Y9_ORT_PYTHON (with onnxruntime,
// default python3 on the PATH).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/training/weights.h"
#include "bench/official_baseline.h"
#include "engine/autograd.h"
#include "engine/tensor.h"
#include "graph/fuse.h"
#include "graph/model.h"

namespace fs = std::filesystem;

namespace {

using engine::Tensor;

const char* kModels[] = {"yolov9-s-converted", "gelan-s-converted"};
constexpr int64_t kImg = 640;

using bench::env_or;
// A positive integer from the environment; a bad value ends the program naming the variable (this
// runs at benchmark registration, before main).
int positive_env(const char* name, const char* fallback) { return bench::positive_env("latency_bench", name, fallback); }
int threads() { return positive_env("Y9_LATENCY_THREADS", "2"); }
int iters() { return positive_env("Y9_LATENCY_ITERS", "10"); }
std::string dir() { return env_or("Y9_LATENCY_DIR", std::string(Y9_BENCH_BINARY_DIR) + "/latency"); }

// Runs `cmd`; returns the JSON object on its last stdout line, nullopt on failure.
std::optional<nlohmann::json> run_json(const std::string& cmd) {
  FILE* f = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!f) return std::nullopt;
  std::string out;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), f)) out += buf.data();
  if (pclose(f) != 0) return std::nullopt;
  const size_t end = out.find_last_not_of('\n');
  if (end == std::string::npos) return std::nullopt;
  const size_t nl = out.rfind('\n', end);
  const size_t start = nl == std::string::npos ? 0 : nl + 1;
  try {
    return nlohmann::json::parse(out.substr(start, end + 1 - start));
  } catch (...) {
    return std::nullopt;
  }
}

struct ModelFiles {
  std::string weights, onnx;
  bool official = false;  // weights is an official .pt made by the official code
};

// Makes (once per process) the weights and ONNX files of model m; see the header.
const ModelFiles& files(int64_t m) {
  static std::map<int64_t, ModelFiles> cache;
  if (auto it = cache.find(m); it != cache.end()) return it->second;
  fs::create_directories(dir());
  const std::string name = kModels[m];
  const std::string off = env_or("YOLOV9_OFFICIAL", "");
  const std::string py = env_or("YOLOV9_PYTHON", "/usr/bin/python3");
  ModelFiles f;
  f.weights = dir() + "/" + name + ".pt";
  if (!fs::exists(f.weights) && !off.empty())
    std::system((py + " " + Y9_BENCH_SOURCE_DIR + "/bench/official/make_converted.py '" + dir() + "' >/dev/null 2>&1").c_str());
  f.official = fs::exists(f.weights);
  if (!f.official) {  // our own randomly initialised gelan-s (yolov9-s-converted has the same graph)
    f.weights = dir() + "/" + name + ".safetensors";
    if (!fs::exists(f.weights)) {
      auto model = graph::Model::from_yaml(std::string(Y9_BENCH_SOURCE_DIR) + "/configs/models/gelan-s.yaml");
      training::save_model_weights(*model, f.weights);
    }
  }
  f.onnx = dir() + "/" + name + ".onnx";
  if (!fs::exists(f.onnx))
    std::system((std::string(Y9_BENCH_BINARY_DIR) + "/yolov9 export --weights '" + f.weights + "' --format onnx --img " +
                 std::to_string(kImg) + " --out '" + f.onnx + "' >/dev/null 2>&1")
                    .c_str());
  return cache[m] = f;
}

// Why a baseline of model m is missing: (m, framework) -> reason (printed under the table).
std::map<std::pair<int64_t, std::string>, std::string> g_skipped;

// The baselines of model m, measured once per process: framework -> mean ms (absent: skipped).
const std::map<std::string, double>& baselines(int64_t m) {
  static std::map<int64_t, std::map<std::string, double>> cache;
  if (auto it = cache.find(m); it != cache.end()) return it->second;
  const ModelFiles& f = files(m);
  const std::string script = std::string(Y9_BENCH_SOURCE_DIR) + "/bench/official/latency.py";
  const std::string args = " " + std::to_string(kImg) + " --threads " + std::to_string(threads()) + " --iters " +
                           std::to_string(iters());
  const std::string py = env_or("YOLOV9_PYTHON", "/usr/bin/python3");
  std::map<std::string, double> r;
  auto add = [&](const std::string& key, const std::string& cmd) {
    if (auto j = run_json(cmd))
      r[key] = j->value("mean_ms", 0.0);
    else
      g_skipped[{m, key}] = "this command failed (run it to see why): " + cmd;
  };
  if (fs::exists(f.onnx)) {
    add("ort", env_or("Y9_ORT_PYTHON", "python3") + " " + script + " ort '" + f.onnx + "'" + args);
    add("cvdnn", py + " " + script + " cvdnn '" + f.onnx + "'" + args);
  } else {
    g_skipped[{m, "ort"}] = g_skipped[{m, "cvdnn"}] = "no ONNX file (`yolov9 export --format onnx` of " + f.weights + " failed)";
  }
  if (!f.official)
    g_skipped[{m, "torch"}] = "no official checkpoint (set YOLOV9_OFFICIAL to make it with the official code)";
  else if (env_or("YOLOV9_OFFICIAL", "").empty())
    g_skipped[{m, "torch"}] = "YOLOV9_OFFICIAL is not set (the official model code is needed to load the .pt)";
  else
    add("torch", "YOLOV9_OFFICIAL='" + env_or("YOLOV9_OFFICIAL", "") + "' " + py + " " + script + " torch '" + f.weights + "'" + args);
  return cache[m] = r;
}

std::map<int64_t, double> g_ours_ms;

void BM_InferenceLatency(benchmark::State& st) {
  const int64_t m = st.range(0);
  omp_set_num_threads(threads());
  const ModelFiles& f = files(m);
  training::LoadedModel lm = training::load_model(f.weights);
  graph::fuse(*lm.model);
  lm.model->eval();
  const Tensor x = Tensor::full({1, 3, kImg, kImg}, 0.5);
  engine::autograd::NoGradGuard ng;
  for (int i = 0; i < 2; ++i) lm.model->forward(x);  // warm-up: oneDNN primitives, caches
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st) {
    auto out = lm.model->forward(x);
    benchmark::DoNotOptimize(out.decoded.back().data_ptr());
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                    static_cast<double>(st.iterations());
  g_ours_ms[m] = ms;
  st.SetLabel(std::string(kModels[m]) + (f.official ? " (official .pt)" : " (random gelan-s)") + " @" +
              std::to_string(kImg) + ", " + std::to_string(threads()) + " threads");
  for (const auto& [k, v] : baselines(m)) {
    st.counters[k + "_ms"] = v;
    st.counters[k + "/ours"] = v / ms;
  }
}

}  // namespace

BENCHMARK(BM_InferenceLatency)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1)->Apply([](auto* b) {
  b->Iterations(iters());
});

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The model folder must be writable before any benchmark runs: an exception thrown from inside
  // one ended the program with only "terminate called after throwing ..." (no folder, no variable).
  try {
    fs::create_directories(dir());
    const fs::path probe = fs::path(dir()) / ".y9_write_probe";
    std::FILE* f = std::fopen(probe.c_str(), "wb");
    if (!f || std::fclose(f) != 0) throw std::runtime_error("cannot create a file in it");
    fs::remove(probe);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "latency_bench: the model folder %s (Y9_LATENCY_DIR) is not a writable folder: %s\n",
                 dir().c_str(), e.what());
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // The table for the notes: mean ms per image, and each baseline's time over ours.
  std::printf("\n| model (640 px, batch 1, %d threads) | ours ms | onnxruntime ms | OpenCV DNN ms | official PyTorch ms |\n",
              threads());
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (const auto& [m, ours] : g_ours_ms) {
    const auto& b = baselines(m);
    auto cell = [&](const char* k) {
      auto it = b.find(k);
      if (it == b.end()) return std::string("skipped");
      char s[64];
      std::snprintf(s, sizeof s, "%.1f (%.2fx)", it->second, it->second / ours);
      return std::string(s);
    };
    const std::string row = std::string(kModels[m]) + (files(m).official ? "" : " (random gelan-s)");
    std::printf("| %s | %.1f | %s | %s | %s |\n", row.c_str(), ours, cell("ort").c_str(), cell("cvdnn").c_str(),
                cell("torch").c_str());
  }
  std::printf("(x: the baseline's time over ours; > 1 means ours is faster)\n");
  for (const auto& [key, why] : g_skipped)
    std::printf("skipped: %s, %s: %s\n", kModels[key.first], key.second.c_str(), why.c_str());
  return 0;
}
