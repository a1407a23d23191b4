// Shared pieces of the val/detect end-to-end tests: a tiny synthetic dataset (some images
// stretched to non-square sizes so rect batches and box mapping matter), a small random-init
// model saved as an engine checkpoint, and running the yolov9 program capturing its output.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <opencv2/imgcodecs.hpp>  // (tests that include this use cv::imread; the kit links no imgcodecs: unused there)
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "graph/model.h"
#include "apps/training/weights.h"
#include "graph/state.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "io/synth.h"
#include "tests/source_paths.h"
#include "tests/testutil.h"

namespace e2e {

namespace fs = std::filesystem;

inline std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("y9_valdet_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

/// Synthetic dataset with `n_val` validation images of `img` px; every odd image is stretched to
/// img x (3/4 img) (width x height) and every 4th to (5/8 img) x img: normalised labels stay exact.
inline std::string make_dataset(const std::string& dir, int64_t n_val, int img, int classes = 3) {
  io::SynthOptions o;
  o.out_dir = dir;
  o.n_train = 2;
  o.n_val = n_val;
  o.img_size = img;
  o.seed = 7;
  o.classes = classes;
  io::write_synth_dataset(o);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "images" / "val")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i < files.size(); ++i) {
    cv::Size sz;
    if (i % 4 == 1) sz = cv::Size(img, img * 3 / 4);
    else if (i % 4 == 3) sz = cv::Size(img * 5 / 8, img);
    else continue;
    cv::Mat m = io::read_image_bgr(files[i].string()), r;
    cv::resize(m, r, sz, 0, 0, cv::INTER_AREA);
    io::write_image_bgr(files[i].string(), r);
  }
  return (fs::path(dir) / "data.yaml").string();
}

inline std::string cfg_path(const std::string& name) {
  return testutil::source_file("configs/models/" + name + ".yaml");
}

/// The shipped default hyp file (configs/hyps/hyp.scratch-high.yaml).
inline std::string hyp_path() {
  return testutil::source_file("configs/hyps/hyp.scratch-high.yaml");
}

/// Builds `cfg_name` (random init, seed 1) with nc classes and writes its state_dict with the
/// checkpoint metadata {cfg, nc, names}; returns the model.
inline std::shared_ptr<graph::Model> make_checkpoint(const std::string& cfg_name, int64_t nc, const std::string& path,
                                                     bool ema_prefix = false) {
  graph::BuildOptions bo;
  bo.seed = 1;
  auto m = graph::Model::from_yaml(cfg_path(cfg_name), nc, bo);
  std::string names = "[";
  for (int64_t c = 0; c < nc; ++c) names += (c ? ",\"" : "\"") + io::synth_class_names(static_cast<int>(nc))[c] + "\"";
  names += "]";
  const std::map<std::string, std::string> meta = {{"cfg", cfg_path(cfg_name)}, {"nc", std::to_string(nc)}, {"names", names}};
  if (!ema_prefix) {
    training::save_weights(*m, path, meta);  // the engine's writer (official names)
    return m;
  }
  // a train checkpoint: the EMA copy under "ema." (loaded in preference) and a perturbed "model."
  std::map<std::string, engine::Tensor> t;
  for (const auto& [k, v] : m->state_dict()) {
    t["ema." + k] = v.detach();
    t[k] = v.detach().to(engine::DType::F32).clone();
    if (t[k].dtype() == engine::DType::F32) t[k].fill_(std::nan(""));
  }
  io::save_safetensors(path, t, meta);
  return m;
}

struct RunResult {
  int rc = -1;
  std::string out;      ///< stdout and stderr together
  double seconds = 0;  ///< wall time of the command
};

/// Runs the shell command `cmd` in the source folder (stderr joined to stdout; in the current folder
/// when the source folder does not exist, as in the GPU kit) and returns its exit status (-1 when
/// killed by a signal), output and wall time.
inline RunResult run_shell(const std::string& cmd) {
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  const std::string cd = fs::is_directory(Y9_SOURCE_DIR, ec) ? "cd '" + std::string(Y9_SOURCE_DIR) + "' && " : "";
  FILE* p = ::popen((cd + cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

/// Runs the yolov9 program (Y9_BINARY_DIR/yolov9, or the one beside the test in the GPU kit:
/// testutil::program_path) with `args` in the source folder; `env` is prepended as environment
/// assignments ("Y9_DEBUG=1").
inline RunResult run_cli(const std::string& args, const std::string& env = "") {
  const std::string exe = testutil::program_path(Y9_BINARY_DIR);
  if (!fs::exists(exe)) {
    RunResult r;
    r.out = "program not built: " + exe;
    return r;
  }
  return run_shell("OMP_NUM_THREADS=2 " + env + " '" + exe + "' " + args);
}

}  // namespace e2e
