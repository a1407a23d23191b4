// End-to-end tests of `yolov9 train` on a tiny synthetic dataset (io/synth, 64 px images): a
// short run whose losses fall and whose every output file exists and parses; bit-for-bit resume
// (2 epochs straight vs 1 epoch + stop + --resume, and a stop in the middle of an epoch); and the
// error messages for bad input (unknown flag, missing hyp key, unwritable run directory, weights
// from another config, diverging loss). Runs the built program (Y9_BINARY_DIR/yolov9).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <opencv2/imgcodecs.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/checkpoint.h"
#include "io/grad_norm_log.h"
#include "io/safetensors.h"
#include "io/synth.h"
#include "ops/autocast.h"

namespace fs = std::filesystem;

namespace {

struct RunResult {
  int code = -1;
  std::string out;
};

fs::path g_root;

/// Runs `yolov9 args` with the environment assignments `env` ("NAME=value ...", may be empty).
RunResult run(const std::string& args, const std::string& env = "") {
  const fs::path log = g_root / "cmd.log";
  // One OpenMP thread: tiny 64 px layers are dominated by fork/join cost on a loaded machine,
  // and the bitwise comparisons need a fixed thread count anyway.
  const std::string cmd = "OMP_NUM_THREADS=1 " + env + " " + std::string(Y9_BINARY_DIR) + "/yolov9 " + args + " > " +
                          log.string() + " 2>&1";
  const int st = std::system(cmd.c_str());
  RunResult r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  r.out = ss.str();
  return r;
}

std::string base_args(const std::string& name) {
  return "train --cfg gelan-t.yaml --data " + (g_root / "data" / "data.yaml").string() +
         " --img 64 --batch 8 --workers 2 --deterministic --project " + (g_root / "runs").string() + " --name " +
         name + " --exist-ok";
}

fs::path run_dir(const std::string& name) { return g_root / "runs" / name; }

std::vector<std::vector<double>> read_results(const fs::path& csv, std::vector<std::string>* header) {
  std::ifstream f(csv);
  std::string line;
  std::vector<std::vector<double>> rows;
  bool first = true;
  while (std::getline(f, line)) {
    std::stringstream ss(line);
    std::string cell;
    std::vector<double> row;
    while (std::getline(ss, cell, ',')) {
      if (first) {
        cell.erase(0, cell.find_first_not_of(' '));
        header->push_back(cell);
      } else {
        row.push_back(std::stod(cell));
      }
    }
    if (!first) rows.push_back(row);
    first = false;
  }
  return rows;
}

void expect_same_tensors(const std::map<std::string, engine::Tensor>& a, const std::map<std::string, engine::Tensor>& b,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  int64_t differ = 0;
  std::string first;
  for (const auto& [k, t] : a) {
    auto it = b.find(k);
    ASSERT_NE(it, b.end()) << what << " " << k;
    ASSERT_EQ(t.shape(), it->second.shape()) << k;
    const size_t nbytes = static_cast<size_t>(t.numel()) * engine::dtype_size(t.dtype());
    if (std::memcmp(t.contiguous().data_ptr(), it->second.contiguous().data_ptr(), nbytes) != 0) {
      if (first.empty()) first = k;
      ++differ;
    }
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " tensors differ, first " << first;
}

class TrainE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = fs::temp_directory_path() / ("y9_train_e2e_" + std::to_string(::getpid()));
    fs::create_directories(g_root);
    io::SynthOptions so;
    so.out_dir = (g_root / "data").string();
    so.n_train = 16;
    so.n_val = 8;
    so.img_size = 64;
    so.seed = 1;
    io::write_synth_dataset(so);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!std::getenv("Y9_KEEP_TEST_DIRS")) fs::remove_all(g_root, ec);
  }
};

}  // namespace

TEST_F(TrainE2E, TinyRunWritesEveryOutputAndLossesFall) {
  const RunResult r = run(base_args("tiny") + " --epochs 4 --nbs 8 --plot-features 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path d = run_dir("tiny");
  std::vector<std::string> header;
  const auto rows = read_results(d / "results.csv", &header);
  const std::vector<std::string> want = {"epoch", "train/box_loss", "train/cls_loss", "train/dfl_loss",
                                         "metrics/precision", "metrics/recall", "metrics/mAP_0.5",
                                         "metrics/mAP_0.5:0.95", "val/box_loss", "val/cls_loss", "val/dfl_loss",
                                         "x/lr0", "x/lr1", "x/lr2", "grad_norm"};
  EXPECT_EQ(header, want) << "the official columns first, ours (grad_norm) appended";
  ASSERT_EQ(rows.size(), 4u) << r.out;
  // grad_norm.csv: one row per optimizer step (nbs 8 = batch 8: a step per batch, 2 per epoch);
  // results.csv's grad_norm is each epoch's mean of them.
  const auto steps = io::read_grad_norms((d / "grad_norm.csv").string());
  ASSERT_EQ(steps.size(), 8u);
  for (size_t e = 0; e < rows.size(); ++e) {
    ASSERT_EQ(rows[e].size(), 15u);
    const double mean = (steps[2 * e].norm + steps[2 * e + 1].norm) / 2;
    EXPECT_EQ(steps[2 * e].epoch, static_cast<int64_t>(e));
    EXPECT_NEAR(rows[e][14], mean, 1e-4 * mean) << "epoch " << e;
    EXPECT_GT(rows[e][14], 0.0);
    EXPECT_EQ(rows[e][0], static_cast<double>(e));
    for (double v : rows[e]) EXPECT_TRUE(std::isfinite(v));
    EXPECT_GT(rows[e][9], 0.0) << "val cls loss computed";
  }
  // The train loss of 2 mosaic batches swings with the number of boxes that survive the
  // augmentation; the val loss (same 8 un-augmented images every epoch, EMA weights) does not.
  auto val_total = [](const std::vector<double>& r) { return r[8] + r[9] + r[10]; };
  std::printf("val loss (box+cls+dfl) by epoch:");
  for (const auto& row : rows) std::printf(" %.5f", val_total(row));
  std::printf("\ntrain loss epoch 0: %.4f, last: %.4f\n", rows.front()[1] + rows.front()[2] + rows.front()[3],
              rows.back()[1] + rows.back()[2] + rows.back()[3]);
  for (size_t e = 1; e < rows.size(); ++e) EXPECT_LT(val_total(rows[e]), val_total(rows[e - 1])) << "epoch " << e;

  for (const char* w : {"weights/last.safetensors", "weights/best.safetensors"}) {
    const io::Checkpoint ck = io::load_checkpoint((d / w).string());
    EXPECT_FALSE(ck.model.empty());
    EXPECT_EQ(ck.model.size(), ck.ema.size());
    EXPECT_FALSE(ck.optim.empty());
    EXPECT_EQ(ck.meta.at("format"), io::kCkptFormat);
    EXPECT_FALSE(ck.meta.at("cfg_yaml").empty());
    EXPECT_EQ(ck.meta.at("nc"), "3");
  }
  const io::Checkpoint last_ck = io::load_checkpoint((d / "weights/last.safetensors").string());
  EXPECT_EQ(last_ck.meta.at("epoch"), "3");
  EXPECT_EQ(last_ck.meta.at("finished"), "1");
  YAML::Node hyp = YAML::LoadFile((d / "hyp.yaml").string());
  EXPECT_DOUBLE_EQ(hyp["lr0"].as<double>(), 0.01);
  EXPECT_DOUBLE_EQ(hyp["anchor_t"].as<double>(), 5.0);
  EXPECT_DOUBLE_EQ(hyp["weight_decay"].as<double>(), 0.0005);  // unscaled
  YAML::Node opt = YAML::LoadFile((d / "opt.yaml").string());
  EXPECT_EQ(opt["epochs"].as<int>(), 4);
  EXPECT_EQ(opt["batch_size"].as<int>(), 8);
  EXPECT_EQ(opt["save_dir"].as<std::string>(), d.string());
  EXPECT_TRUE(opt["hyp"].IsMap());
  for (const char* img : {"results.png", "grad_norm.png", "labels.jpg", "train_batch0.jpg", "train_batch1.jpg",
                          "features/epoch0/stage0_Conv_features.png", "features/epoch2/stage0_Conv_features.png",
                          "features/epoch3/stage0_Conv_features.png"}) {
    const cv::Mat m = cv::imread((d / img).string());
    EXPECT_FALSE(m.empty()) << img;
  }
  EXPECT_FALSE(fs::exists(d / "features" / "epoch1")) << "--plot-features 2: epochs 0, 2 and the last";
  EXPECT_NE(r.out.find("box_loss"), std::string::npos);
  EXPECT_NE(r.out.find("img/s"), std::string::npos);
  EXPECT_NE(r.out.find("epochs completed"), std::string::npos);
}

TEST_F(TrainE2E, ResumeIsBitExact) {
  // nb = 16 images / batch 8 = 2 batches per epoch.
  const RunResult a = run(base_args("straight") + " --epochs 2");
  ASSERT_EQ(a.code, 0) << a.out;
  const RunResult b1 = run(base_args("stopped") + " --epochs 2 --stop-after-batches 2");
  ASSERT_EQ(b1.code, 0) << b1.out;
  const io::Checkpoint mid = io::load_checkpoint((run_dir("stopped") / "weights/last.safetensors").string());
  EXPECT_EQ(mid.meta.at("epoch"), "0");
  EXPECT_EQ(mid.meta.at("finished"), "0");
  const RunResult b2 = run("train --resume " + (run_dir("stopped") / "weights/last.safetensors").string());
  ASSERT_EQ(b2.code, 0) << b2.out;
  // Stop inside epoch 1 (after its first batch): accumulated grads and running losses travel too.
  const RunResult c1 = run(base_args("midepoch") + " --epochs 2 --stop-after-batches 3");
  ASSERT_EQ(c1.code, 0) << c1.out;
  // As if the run had died after logging the norm of the step after its checkpoint: the resumed
  // run re-runs that step, so the row must not stay twice.
  io::append_grad_norm((run_dir("midepoch") / "grad_norm.csv").string(), io::GradNormRow{1, 3, 2.0, 999.0});
  const RunResult c2 = run("train --resume " + (run_dir("midepoch") / "weights").parent_path().string());
  ASSERT_EQ(c2.code, 0) << c2.out;

  const io::Checkpoint A = io::load_checkpoint((run_dir("straight") / "weights/last.safetensors").string());
  for (const char* name : {"stopped", "midepoch"}) {
    SCOPED_TRACE(name);
    const io::Checkpoint B = io::load_checkpoint((run_dir(name) / "weights/last.safetensors").string());
    expect_same_tensors(A.model, B.model, "model");
    expect_same_tensors(A.ema, B.ema, "ema");
    expect_same_tensors(A.optim, B.optim, "optimizer");
    EXPECT_EQ(A.meta.at("updates"), B.meta.at("updates"));
    EXPECT_EQ(A.meta.at("epoch"), B.meta.at("epoch"));
    std::vector<std::string> h1, h2;
    const auto ra = read_results(run_dir("straight") / "results.csv", &h1);
    const auto rb = read_results(run_dir(name) / "results.csv", &h2);
    EXPECT_EQ(ra, rb) << "results.csv rows differ";
    // The per-step gradient norms survive the stop and resume: no step lost or logged twice.
    auto text = [](const fs::path& p) {
      std::ifstream f(p);
      std::stringstream ss;
      ss << f.rdbuf();
      return ss.str();
    };
    const std::string ga = text(run_dir("straight") / "grad_norm.csv");
    EXPECT_FALSE(ga.empty());
    EXPECT_EQ(ga, text(run_dir(name) / "grad_norm.csv"));
  }
}

// The flat parameters are frozen between optimizer steps (Y9_CPU_WEIGHT_CACHE=1; 0 is the default): the
// CPU convolutions keep each weight in their layouts through an accumulation window and derive
// them again after every step, and validation keeps the EMA model's. Bit-identical to reordering
// on every call (0): a layout served stale after a step would change the weights, the EMA, the
// optimizer state and the validation metrics.
TEST_F(TrainE2E, WeightLayoutCacheChangesNoBit) {
  // nb = 2 batches per epoch, --accumulate 2: one step per epoch, each after a 2-batch window.
  const std::string args = " --epochs 2 --accumulate 2";
  const RunResult a = run(base_args("wcache_on") + args, "Y9_CPU_WEIGHT_CACHE=1");
  ASSERT_EQ(a.code, 0) << a.out;
  const RunResult b = run(base_args("wcache_off") + args);  // the default: 0
  ASSERT_EQ(b.code, 0) << b.out;
  const io::Checkpoint A = io::load_checkpoint((run_dir("wcache_on") / "weights/last.safetensors").string());
  const io::Checkpoint B = io::load_checkpoint((run_dir("wcache_off") / "weights/last.safetensors").string());
  expect_same_tensors(A.model, B.model, "model");
  expect_same_tensors(A.ema, B.ema, "ema");
  expect_same_tensors(A.optim, B.optim, "optimizer");
  EXPECT_EQ(A.meta.at("updates"), "2");
  std::vector<std::string> h1, h2;
  EXPECT_EQ(read_results(run_dir("wcache_on") / "results.csv", &h1),
            read_results(run_dir("wcache_off") / "results.csv", &h2));
  const RunResult bad = run(base_args("wcache_bad") + args, "Y9_CPU_WEIGHT_CACHE=yes");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("Y9_CPU_WEIGHT_CACHE must be 1 or 0 (the default), got 'yes'"), std::string::npos) << bad.out;
}

TEST_F(TrainE2E, ClearErrors) {
  RunResult r = run(base_args("err") + " --epochs 1 --no-such-flag");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("no-such-flag"), std::string::npos) << r.out;

  r = run(base_args("err") + " --epochs 1 --evolve --bucket x --sync-bn --noautoanchor --amp --stop-after-batches 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("notice: --evolve"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("notice: --sync-bn"), std::string::npos) << r.out;
  // AMP is CUDA-only (official): forced on the CPU it is dropped with a notice.
  EXPECT_NE(r.out.find("notice: --amp fp16 ignored: AMP is CUDA-only"), std::string::npos) << r.out;
  r = run(base_args("err") + " --epochs 1 --amp --no-amp");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--amp and --no-amp exclude each other"), std::string::npos) << r.out;
  r = run(base_args("err") + " --epochs 1 --amp fp8");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--amp fp8: expected fp16 or bf16"), std::string::npos) << r.out;
  r = run(base_args("err") + " --epochs 1 --cpu-threads 0");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--cpu-threads must be auto or an integer in 1..1024 (got '0')"), std::string::npos) << r.out;
  r = run(base_args("err") + " --epochs 1 --cpu-threads auto --deterministic");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("cannot be combined with --deterministic"), std::string::npos) << r.out;
  // --cpu-threads auto trains (the governor samples /proc between steps); base_args without
  // --deterministic.
  std::string nondet = base_args("auto");
  nondet.erase(nondet.find(" --deterministic"), std::string(" --deterministic").size());
  r = run(nondet + " --epochs 1 --cpu-threads auto --stop-after-batches 2");
  EXPECT_EQ(r.code, 0) << r.out;

  // Hyp file without a key the run needs.
  const fs::path hyp = g_root / "hyp_missing.yaml";
  std::ofstream(hyp) << "lr0: 0.01\nlrf: 0.01\nmomentum: 0.937\nweight_decay: 0.0005\n";
  r = run(base_args("err") + " --epochs 1 --hyp " + hyp.string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("warmup_epochs"), std::string::npos) << r.out;

  // Unwritable run directory: a regular file where the project folder should be.
  const fs::path blocker = g_root / "blocker";
  std::ofstream(blocker) << "x";
  r = run("train --cfg gelan-t.yaml --data " + (g_root / "data" / "data.yaml").string() +
          " --img 64 --batch 8 --epochs 1 --project " + (blocker / "runs").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find((blocker / "runs").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Not a directory"), std::string::npos) << r.out;

  // Weights from another config: one tensor with a wrong shape.
  const fs::path bad = g_root / "bad_weights.safetensors";
  io::save_safetensors(bad.string(), {{"model.0.conv.weight", engine::Tensor::zeros({4, 3, 3, 3})}});
  r = run(base_args("err") + " --epochs 1 --weights " + bad.string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("model.0.conv.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[4, 3, 3, 3]"), std::string::npos) << r.out;

  // A diverging run stops with the batch index and the advice to lower lr0.
  const fs::path big = g_root / "hyp_big.yaml";
  {
    std::ifstream src(std::string(Y9_SOURCE_DIR) + "/configs/hyps/hyp.scratch-high.yaml");
    std::stringstream ss;
    ss << src.rdbuf();
    std::string s = ss.str();
    s.replace(s.find("lr0: 0.01"), 9, "lr0: 1e30");
    s.replace(s.find("warmup_bias_lr: 0.1"), 19, "warmup_bias_lr: 1e30");
    std::ofstream(big) << s;
  }
  r = run(base_args("nan") + " --epochs 3 --hyp " + big.string());
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("not finite"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lower the learning rate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("last finite loss"), std::string::npos) << r.out;
}

// `yolov9 train --benchmark N` (issue 11, "Measurement"): 3 warm-up steps, N timed ones, the report,
// then exit 0 without validation or checkpoints; synthetic data repeats the first batch (no data
// wait); with --resume it is refused.
TEST_F(TrainE2E, BenchmarkReportsStepsAndExits) {
  for (const std::string data : {"real", "synthetic"}) {
    SCOPED_TRACE(data);
    RunResult r = run(base_args("bench_" + data) + " --benchmark 2 --benchmark-data " + data);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("benchmark: 2 steps (after 3 warm-up steps) of batch"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(", " + data + " data: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" img/s, "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("ms per step: data wait "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("peak memory: tensors "), std::string::npos) << r.out;
    if (data == "synthetic") EXPECT_NE(r.out.find("data wait 0.0,"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("Class     Images"), std::string::npos) << "no validation in a benchmark:\n" << r.out;
    EXPECT_FALSE(fs::exists(g_root / "runs" / ("bench_" + data) / "weights" / "last.safetensors")) << r.out;
  }
  RunResult r = run(base_args("bench_bad") + " --benchmark 2 --benchmark-data random");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--benchmark-data"), std::string::npos) << r.out;
  r = run(base_args("bench_bad") + " --benchmark -1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--benchmark must be in 0..1000000"), std::string::npos) << r.out;
}

// `--amp bf16` on the CPU: with native BF16 the notice says the convolutions run in BF16 and the
// benchmark line names it; without, the notice says it is ignored and the run is FP32. Either way
// the run ends normally, and `info --backends` reports the same answer. `--amp` (FP16) stays
// CUDA-only.
TEST_F(TrainE2E, AmpBf16OnTheCpuIsBf16ConvolutionsWhereNative) {
  const bool native = ops::cpu_bf16_convolutions(engine::Device::cpu());
  RunResult r = run(base_args("bench_bf16") + " --benchmark 2 --benchmark-data synthetic --amp bf16");
  ASSERT_EQ(r.code, 0) << r.out;
  if (native) {
    EXPECT_NE(r.out.find("CPU: convolutions in BF16"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("on cpu (BF16 convolutions), synthetic data"), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find("no native BF16"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("(BF16 convolutions)"), std::string::npos) << r.out;
  }
  r = run(base_args("bench_fp16") + " --benchmark 2 --benchmark-data synthetic --amp");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("AMP is CUDA-only"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(BF16 convolutions)"), std::string::npos) << r.out;
  const RunResult info = run("info --backends");
  ASSERT_EQ(info.code, 0) << info.out;
  EXPECT_NE(info.out.find(native ? "BF16 convolutions (train --amp bf16): yes"
                                 : "BF16 convolutions (train --amp bf16): no"),
            std::string::npos)
      << info.out;
}

// `--batch -1` (issue 11, "Memory"): the official AutoBatch; training on the CPU it prints the
// official fallback and trains with batch 16 (16 images: one batch, accumulate 64 / 16 = 4).
// opt.yaml keeps -1 as the official one, the checkpoint the batch used. Bad values are refused.
TEST_F(TrainE2E, AutoBatchOnCpuUsesDefault16) {
  std::string args = base_args("autobatch") + " --epochs 1 --noval --noplots";
  args.replace(args.find(" --batch 8 "), 11, " --batch -1 ");
  RunResult r = run(args);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("AutoBatch: Computing optimal batch size for --imgsz 64\n"
                       "AutoBatch: CUDA not detected, using default CPU batch-size 16\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(1 batches/epoch, warm-up 100 iterations, accumulate 4)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("      Epoch    CPU_mem   box_loss"), std::string::npos) << r.out;
  const fs::path d = run_dir("autobatch");
  EXPECT_EQ(YAML::LoadFile((d / "opt.yaml").string())["batch_size"].as<int>(), -1);
  const io::Checkpoint ck = io::load_checkpoint((d / "weights/last.safetensors").string());
  EXPECT_NE(ck.meta.at("opt").find("\"batch_size\":16"), std::string::npos) << ck.meta.at("opt");

  for (const std::string bad : {"0", "-2"}) {
    args = base_args("autobatch_bad") + " --epochs 1";
    args.replace(args.find(" --batch 8 "), 11, " --batch " + bad + " ");
    r = run(args);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(bad == "0" ? "--batch-size must be -1 (AutoBatch) or in 1..65536 (got 0)"
                                    : "--batch-size: Value -2 not in range -1 to 65536"),
              std::string::npos)
        << r.out;
  }
}

// Issue 12 (val on the device): --val-batch sets the batch of the validation during training, and an
// out-of-memory error there (simulated with Y9_FAULT_VAL_OOM=<n>: batches of more than n images
// fail) halves it and retries; the smaller batch is kept for the later epochs. When even batch 1
// fails, that epoch's validation is skipped with a warning and the run still finishes.
TEST_F(TrainE2E, ValOutOfMemoryHalvesTheValBatchAndNeverLosesTheRun) {
  ::setenv("Y9_FAULT_VAL_OOM", "2", 1);
  RunResult r = run(base_args("val_oom") + " --epochs 2 --val-batch 8 --noplots");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("validation ran out of host memory at batch size 8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("retrying with validation batch size 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("retrying with validation batch size 2"), std::string::npos) << r.out;
  size_t oom = 0;
  for (size_t at = r.out.find("ran out of"); at != std::string::npos; at = r.out.find("ran out of", at + 1)) ++oom;
  EXPECT_EQ(oom, 2u) << "the halved batch must be kept for epoch 2:\n" << r.out;
  size_t rows = 0;
  for (size_t at = r.out.find("                   all "); at != std::string::npos;
       at = r.out.find("                   all ", at + 1))
    ++rows;
  EXPECT_EQ(rows, 2u) << r.out;  // both epochs validated
  EXPECT_TRUE(fs::exists(run_dir("val_oom") / "weights/best.safetensors"));

  ::setenv("Y9_FAULT_VAL_OOM", "0", 1);  // every batch fails
  r = run(base_args("val_oom_skip") + " --epochs 1 --val-batch 2 --noplots");
  ::unsetenv("Y9_FAULT_VAL_OOM");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("validation skipped for this epoch (metrics 0); training continues"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(run_dir("val_oom_skip") / "weights/last.safetensors"));

  r = run(base_args("val_batch_bad") + " --epochs 1 --val-batch -1");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--val-batch"), std::string::npos) << r.out;
}
