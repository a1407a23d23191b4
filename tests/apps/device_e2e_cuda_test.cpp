// `yolov9 train`, `val` and `detect` with --device 0 against the same commands with --device cpu
// (label gpu: skips without a usable CUDA device; under the CUDA emulator it runs as
// device_e2e_cuda_test_emu_fwd/_emu_rev, where the program's every hand-written kernel runs
// emulated and cuDNN/cuBLAS entries are served by the CPU). Runs the built program
// (Y9_BINARY_DIR/yolov9) on a tiny synthetic dataset: yolov9-t (PGI: the dual head and the
// CBLinear/CBFuse branch) at 64 px, batch 2, one step in FP32 (--no-amp) against the CPU: the
// device line, the step's loss items (computed before the update, so they must agree to 1e-4),
// the first gradient norm (1e-2: BatchNorm over 2x2 maps of a random-init model amplifies
// summation-order noise), a finite validation row, checkpoints readable on the CPU; then val and
// detect of one checkpoint on both devices agree (detections within 1e-3 of the image size, the
// same count). And one step with FP16 AMP (the default on CUDA, as officially: the forward under
// autocast FP16, ops/autocast.h): the AMP report (the first step at the initial loss scale 2^16
// overflows on this model and is skipped, as it would be by PyTorch's GradScaler), loss items
// within 5e-2 of the CPU's (FP16 rounding amplified by the same BatchNorm over 2x2 maps; see
// tests/train/autocast_cuda_test.cpp), a finite validation row.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "ops/ops.h"
#include "io/synth.h"
#include "tests/apps/e2e_util.h"
#include "tests/source_paths.h"
#include "tests/testutil.h"

namespace fs = std::filesystem;

namespace {

// cuDNN convolutions in strict FP32 (no TF32 tensor cores, which PyTorch and we allow by default):
// this test compares the device with the CPU within float rounding. On the lent H200 with TF32
// allowed it differed by more than 1e-5 in low-confidence boxes (TF32's effect confirmed on the
// H200 by step_cuda_test; Y9_CUDNN_NO_TF32=0 in the environment wins). Set before the first
// convolution: the backend reads the variable once.
[[maybe_unused]] const bool kStrictFp32 = [] {
  return ::setenv("Y9_CUDNN_NO_TF32", "1", /*overwrite=*/0) == 0;
}();

// The program with one OpenMP thread (tiny 64 px layers; the assignment after run_cli's wins).
e2e::RunResult run(const std::string& args) { return e2e::run_cli(args, "OMP_NUM_THREADS=1"); }

// results.csv: header names (trimmed) -> the values of the last row.
std::map<std::string, double> last_row(const fs::path& csv) {
  std::ifstream f(csv);
  std::string line, header, last;
  std::getline(f, header);
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    for (std::string c; std::getline(ss, c, ',');) {
      c.erase(0, c.find_first_not_of(' '));
      v.push_back(c);
    }
    return v;
  };
  const auto h = split(header), vals = split(last);
  std::map<std::string, double> m;
  for (size_t i = 0; i < h.size() && i < vals.size(); ++i) m[h[i]] = std::stod(vals[i]);
  return m;
}

double first_grad_norm(const fs::path& csv) {
  std::ifstream f(csv);
  std::string line;
  std::getline(f, line);  // header
  std::getline(f, line);
  return std::stod(line.substr(line.rfind(',') + 1));
}

// detect --save-txt --save-conf label rows of every file: class, cx, cy, w, h, conf.
std::map<std::string, std::vector<std::vector<double>>> labels(const fs::path& dir) {
  std::map<std::string, std::vector<std::vector<double>>> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream f(e.path());
    auto& rows = out[e.path().filename().string()];
    for (std::string line; std::getline(f, line);) {
      std::stringstream ss(line);
      std::vector<double> r;
      for (double v; ss >> v;) r.push_back(v);
      rows.push_back(r);
    }
  }
  return out;
}

bool relatively_close(double a, double b, double rtol) {
  return std::fabs(a - b) <= rtol * std::max({std::fabs(a), std::fabs(b), 1e-12});
}

TEST(DeviceE2E, TrainValDetectOnCudaMatchTheCpu) {
  Y9_SKIP_WITHOUT_GPU();
  const fs::path root = fs::temp_directory_path() / ("y9_device_e2e_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  io::SynthOptions so;
  so.out_dir = (root / "data").string();
  so.n_train = 2;
  so.n_val = 2;
  so.img_size = 64;
  so.seed = 3;
  io::write_synth_dataset(so);
  const std::string cfg = testutil::source_file("configs/models/yolov9-t.yaml");
  const std::string data = (root / "data" / "data.yaml").string();
  auto train = [&](const std::string& device, const std::string& name, const std::string& extra = "") {
    return run("train --cfg " + cfg + " --data " + data + " --img 64 --batch 2 --epochs 1 --workers 0 --seed 0 " +
                         "--noplots --device " + device + " --project " + (root / "runs").string() + " --name " +
                         name + " --exist-ok" + extra);
  };
  const e2e::RunResult cpu = train("cpu", "cpu");
  ASSERT_EQ(cpu.rc, 0) << cpu.out;
  const e2e::RunResult gpu = train("0", "gpu", " --no-amp");
  ASSERT_EQ(gpu.rc, 0) << gpu.out;
  EXPECT_NE(gpu.out.find("device: cuda:0"), std::string::npos) << gpu.out;
  EXPECT_EQ(cpu.out.find("device: cuda"), std::string::npos) << cpu.out;
  // The CUDA run augments on the device (--augment-device gpu is the default there), so the loss
  // items below also check that its batch equals the CPU loader's.
  EXPECT_NE(gpu.out.find("augment: on cuda:0"), std::string::npos) << gpu.out;
  EXPECT_EQ(cpu.out.find("augment: on"), std::string::npos) << cpu.out;
  EXPECT_EQ(gpu.out.find("AMP ("), std::string::npos) << gpu.out;
  EXPECT_NE(gpu.out.find("GPU_mem"), std::string::npos) << gpu.out;  // the official progress column

  // FP16 AMP (the default on CUDA): the forward under autocast.
  const e2e::RunResult amp = train("0", "gpu_amp");
  ASSERT_EQ(amp.rc, 0) << amp.out;
  EXPECT_NE(amp.out.find("AMP (fp16): "), std::string::npos) << amp.out;
  for (const char* key : {"epoch 0/0:", "AMP (fp16): "}) {  // the epoch summary and the AMP report
    const size_t at = amp.out.find(key);
    if (at != std::string::npos) std::printf("  AMP run: %s\n", amp.out.substr(at, amp.out.find('\n', at) - at).c_str());
  }
  const auto ra = last_row(root / "runs" / "gpu_amp" / "results.csv");

  const auto rc = last_row(root / "runs" / "cpu" / "results.csv");
  const auto rg = last_row(root / "runs" / "gpu" / "results.csv");
  for (const char* k : {"train/box_loss", "train/cls_loss", "train/dfl_loss"}) {
    ASSERT_TRUE(rc.count(k) && rg.count(k)) << k;
    EXPECT_TRUE(relatively_close(rc.at(k), rg.at(k), 1e-4)) << k << ": cpu " << rc.at(k) << " cuda " << rg.at(k);
  }
  for (const char* k : {"val/box_loss", "val/cls_loss", "val/dfl_loss", "metrics/mAP_0.5:0.95"}) {
    ASSERT_TRUE(rg.count(k)) << k;
    EXPECT_TRUE(std::isfinite(rg.at(k))) << k;
    ASSERT_TRUE(ra.count(k)) << k;
    EXPECT_TRUE(std::isfinite(ra.at(k))) << "AMP " << k;
  }
  // FP16 rounding of the forward can move the TAL assigner's discrete choices (which anchors a
  // target gets), which moves the DFL term most: on an AVX2 machine (oneDNN's FP32 summation order
  // under the emulator's FP16 fallback differs from AVX-512's) dfl came out 0.1804 vs the CPU's
  // 0.1954 (7.7%), box and cls within 5%; on an H200 (cuDNN's FP16 convolutions) box came out
  // 0.3066 vs 0.3315 (7.5%), and dfl 0.1761 then 0.1752 vs 0.1953 (9.9%, 10.3%: the second with
  // the mixed-precision BatchNorm kernels, whose FP32 statistics are those of the cast path). So
  // all three at 15%: this checks that AMP trains on the real batch, the FP16 ops themselves are
  // compared with FP32 in autocast_cuda_test and batch_norm_silu_cuda_test.
  for (const char* k : {"train/box_loss", "train/cls_loss", "train/dfl_loss"}) {
    ASSERT_TRUE(ra.count(k)) << k;
    const double tol = 0.15;
    EXPECT_TRUE(relatively_close(rc.at(k), ra.at(k), tol)) << k << ": cpu " << rc.at(k) << " cuda AMP " << ra.at(k);
  }
  const double nc = first_grad_norm(root / "runs" / "cpu" / "grad_norm.csv");
  const double ng = first_grad_norm(root / "runs" / "gpu" / "grad_norm.csv");
  EXPECT_GT(ng, 0.0);
  EXPECT_TRUE(relatively_close(nc, ng, 1e-2)) << "first gradient norm: cpu " << nc << " cuda " << ng;

  // One checkpoint (written from the device run, read on both devices).
  const std::string w = (root / "runs" / "gpu" / "weights" / "last.safetensors").string();
  ASSERT_TRUE(fs::exists(w));
  auto val = [&](const std::string& device, const std::string& name) {
    return run("val --weights " + w + " --data " + data + " --img 64 --batch 2 --workers 0 --device " + device +
                         " --no-plots --project " + (root / "val").string() + " --name " + name + " --exist-ok");
  };
  const e2e::RunResult vc = val("cpu", "cpu"), vg = val("0", "gpu");
  ASSERT_EQ(vc.rc, 0) << vc.out;
  ASSERT_EQ(vg.rc, 0) << vg.out;
  auto table = [](const std::string& out) {  // the "all" row of the metrics table
    const size_t at = out.find("                   all ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_FALSE(table(vc.out).empty()) << vc.out;
  EXPECT_EQ(table(vc.out), table(vg.out)) << vc.out << "\n---\n" << vg.out;

  auto detect = [&](const std::string& device, const std::string& name) {
    return run("detect --weights " + w + " --source " + (root / "data" / "images" / "val").string() +
                         " --img 64 --conf-thres 0.0001 --save-txt --save-conf --nosave --device " + device +
                         " --project " + (root / "det").string() + " --name " + name + " --exist-ok");
  };
  const e2e::RunResult dc = detect("cpu", "cpu"), dg = detect("0", "gpu");
  ASSERT_EQ(dc.rc, 0) << dc.out;
  ASSERT_EQ(dg.rc, 0) << dg.out;
  const auto lc = labels(root / "det" / "cpu" / "labels"), lg = labels(root / "det" / "gpu" / "labels");
  ASSERT_EQ(lc.size(), lg.size());
  size_t boxes = 0;
  for (const auto& [file, rows] : lc) {
    ASSERT_TRUE(lg.count(file)) << file;
    const auto& g = lg.at(file);
    ASSERT_EQ(rows.size(), g.size()) << file;
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(rows[i].size(), g[i].size());
      EXPECT_EQ(rows[i][0], g[i][0]) << file << " row " << i;  // class
      for (size_t j = 1; j < rows[i].size(); ++j)
        EXPECT_NEAR(rows[i][j], g[i][j], 1e-3) << file << " row " << i << " column " << j;
      ++boxes;
    }
  }
  EXPECT_GT(boxes, 0u) << "no detection to compare at --conf-thres 0.0001";
  fs::remove_all(root);
}

// Issue 12: `val` and `detect` with --device 0 (the model, NMS and box rescaling on the device; only
// the kept rows come back) give the same boxes as on the CPU for 8 coco128 images. A random-init
// gelan-t (nc 80), its convolution weights scaled so that activations stay O(1) and its class
// biases at -4, so that val (--conf-thres 0.06, below max_det) and detect at 0.25 / 0.01 keep many
// varied boxes: the kept rows (--save-txt --save-conf) and the metrics row must agree.
TEST(DeviceE2E, ValDetectCoco128SameBoxesOnCudaAndCpu) {
  Y9_SKIP_WITHOUT_GPU();
  const std::string coco = testutil::coco128_dir();
  if (coco.empty()) GTEST_SKIP() << "coco128 not found (../shared/data/coco128)";
  const fs::path root = fs::temp_directory_path() / ("y9_device_e2e_coco_" + std::to_string(::getpid()));
  fs::remove_all(root);
  // The first 8 images (sorted) with their labels, and a data.yaml with coco128's 80 names.
  std::vector<fs::path> imgs;
  for (const auto& e : fs::directory_iterator(fs::path(coco) / "images" / "train2017")) imgs.push_back(e.path());
  std::sort(imgs.begin(), imgs.end());
  ASSERT_GE(imgs.size(), 8u);
  imgs.resize(8);
  fs::create_directories(root / "images" / "val");
  fs::create_directories(root / "labels" / "val");
  for (const auto& im : imgs) {
    fs::copy_file(im, root / "images" / "val" / im.filename());
    const fs::path lab = fs::path(coco) / "labels" / "train2017" / (im.stem().string() + ".txt");
    if (fs::exists(lab)) fs::copy_file(lab, root / "labels" / "val" / lab.filename());
  }
  {
    std::ifstream src(fs::path(coco) / "coco128.yaml");
    std::ofstream y(root / "data.yaml");
    y << "path: " << root.string() << "\ntrain: images/val\nval: images/val\n";
    bool names = false;
    for (std::string line; std::getline(src, line);) {
      if (line.rfind("nc:", 0) == 0) y << line << "\n";
      if (line.rfind("names:", 0) == 0) names = true;
      if (names) y << line << "\n";
    }
  }
  // The weights: random init, class biases of both heads' class branches raised.
  const std::string w0 = (root / "w0.safetensors").string(), w = (root / "w.safetensors").string();
  {
    graph::BuildOptions bo;
    bo.seed = 1;
    auto m = graph::Model::from_yaml(e2e::cfg_path("gelan-t"), 80, bo);
    std::string names = "[";
    for (int c = 0; c < 80; ++c) names += (c ? ",\"c" : "\"c") + std::to_string(c) + "\"";
    training::save_weights(*m, w0, {{"cfg", e2e::cfg_path("gelan-t")}, {"nc", "80"}, {"names", names + "]"}});
  }
  io::SafetensorsData sd = io::load_safetensors(w0);
  std::map<std::string, engine::Tensor>& t = sd.tensors;
  int raised = 0;
  for (auto& [k, v] : t) {
    // Kaiming-uniform init (a = sqrt(5)) shrinks activations layer by layer, so the head of a fresh
    // model sees ~0 and every anchor gets the same score and box (exact ties): scale every
    // convolution weight by sqrt(6) to keep O(1) activations and varied scores and boxes.
    // The head's last 1x1 convolutions (box DFL logits, class logits) by 100 more, to spread them.
    const bool last = std::regex_match(k, std::regex(R"(model\.\d+\.cv[23]\.\d+\.2\.weight)"));
    if (v.dim() == 4)
      v = ops::mul_scalar(v.to(engine::DType::F64), std::sqrt(6.0) * (last ? 100.0 : 1.0)).to(v.dtype()).contiguous();
    if (std::regex_match(k, std::regex(R"(model\.\d+\.cv3\.\d+\.2\.bias)")) && v.dim() == 1 && v.size(0) == 80) {
      v = engine::Tensor::full({80}, -4.0, v.dtype());
      ++raised;
    }
  }
  ASSERT_GT(raised, 0) << "no class-branch bias found in " << w0;
  io::save_safetensors(w, t, sd.metadata);

  const std::string data = (root / "data.yaml").string();
  auto val = [&](const std::string& device, const std::string& name) {
    return run("val --weights " + w + " --data " + data + " --img 160 --batch 4 --workers 0 --device " + device +
               " --conf-thres 0.06 --save-txt --save-conf --no-plots --project " + (root / "val").string() + " --name " + name +
               " --exist-ok");
  };
  const e2e::RunResult vc = val("cpu", "cpu"), vg = val("0", "gpu");
  ASSERT_EQ(vc.rc, 0) << vc.out;
  ASSERT_EQ(vg.rc, 0) << vg.out;
  const size_t at = vc.out.find("                   all ");
  ASSERT_NE(at, std::string::npos) << vc.out;
  const std::string row = vc.out.substr(at, vc.out.find('\n', at) - at);
  EXPECT_NE(vg.out.find(row), std::string::npos) << "cpu: " << row << "\n---\n" << vg.out;

  auto detect = [&](const std::string& device, const std::string& name, const std::string& conf) {
    return run("detect --weights " + w + " --source " + (root / "images" / "val").string() + " --img 160 --conf-thres " +
               conf + " --save-txt --save-conf --nosave --device " + device + " --project " + (root / "det").string() +
               " --name " + name + " --exist-ok");
  };
  // Rows are matched as multisets (the same class, every column within 1e-5): the two devices'
  // outputs may differ in the last bits (summation order), which can swap rows of equal printed
  // confidence; anything else (a missing, extra or moved box) fails.
  size_t compared = 0, max_rows = 0;
  auto same = [&](const fs::path& a, const fs::path& b, const char* what) {
    const auto la = labels(a), lb = labels(b);
    ASSERT_EQ(la.size(), lb.size()) << what;
    for (const auto& [file, rows] : la) {
      ASSERT_TRUE(lb.count(file)) << what << " " << file;
      const auto& g = lb.at(file);
      ASSERT_EQ(rows.size(), g.size()) << what << " " << file;
      max_rows = std::max(max_rows, rows.size());
      std::vector<bool> used(g.size(), false);
      for (size_t i = 0; i < rows.size(); ++i) {
        size_t hit = g.size();
        for (size_t k = 0; k < g.size() && hit == g.size(); ++k) {
          if (used[k] || g[k].size() != rows[i].size() || g[k][0] != rows[i][0]) continue;
          bool close = true;
          for (size_t j = 1; j < rows[i].size() && close; ++j) close = std::fabs(rows[i][j] - g[k][j]) <= 1e-5;
          if (close) hit = k;
        }
        EXPECT_LT(hit, g.size()) << what << " " << file << ": cpu row " << i << " has no match on cuda:0";
        if (hit < g.size()) used[hit] = true;
        ++compared;
      }
    }
  };
  same(root / "val" / "cpu" / "labels", root / "val" / "gpu" / "labels", "val");
  const size_t val_rows = compared;
  EXPECT_GT(val_rows, 8u) << "val kept too few boxes to compare";
  EXPECT_LT(max_rows, 300u) << "val reached max_det: the cut among near-equal scores is not comparable";
  for (const char* conf : {"0.25", "0.01"}) {
    const std::string n = std::string("c") + conf;
    const e2e::RunResult dc = detect("cpu", n + "cpu", conf), dg = detect("0", n + "gpu", conf);
    ASSERT_EQ(dc.rc, 0) << dc.out;
    ASSERT_EQ(dg.rc, 0) << dg.out;
    same(root / "det" / (n + "cpu") / "labels", root / "det" / (n + "gpu") / "labels", "detect");
  }
  EXPECT_GT(compared, val_rows) << "detect kept no box to compare";

  // --half on CUDA: FP16 inference (autocast), no CPU notice; the same images get boxes, their
  // metrics row within FP16 rounding of the FP32 one is not asserted (random weights), only sanity.
  const e2e::RunResult vh = run("val --weights " + w + " --data " + data + " --img 160 --batch 4 --workers 0 --device 0 "
                                "--half --conf-thres 0.06 --no-plots --project " + (root / "val").string() +
                                " --name half --exist-ok");
  ASSERT_EQ(vh.rc, 0) << vh.out;
  EXPECT_EQ(vh.out.find("NOTICE --half"), std::string::npos) << vh.out;
  EXPECT_NE(vh.out.find("                   all          8 "), std::string::npos) << vh.out;
  const e2e::RunResult dh = run("detect --weights " + w + " --source " + (root / "images" / "val").string() +
                                " --img 160 --conf-thres 0.01 --half --save-txt --save-conf --nosave --device 0 --project " +
                                (root / "det").string() + " --name half --exist-ok");
  ASSERT_EQ(dh.rc, 0) << dh.out;
  EXPECT_EQ(dh.out.find("NOTICE --half"), std::string::npos) << dh.out;
  const auto lh = labels(root / "det" / "half" / "labels"), l32 = labels(root / "det" / "c0.01gpu" / "labels");
  size_t n16 = 0, n32 = 0;
  for (const auto& [f, rows] : lh) n16 += rows.size();
  for (const auto& [f, rows] : l32) n32 += rows.size();
  EXPECT_NEAR(static_cast<double>(n16), static_cast<double>(n32), 0.1 * static_cast<double>(n32))
      << "FP16 detect kept " << n16 << " boxes, FP32 " << n32;
  std::printf("  coco128: %zu val rows and %zu detect rows equal on cuda:0 and the CPU\n", val_rows, compared - val_rows);
  if (!::testing::Test::HasFailure()) fs::remove_all(root);
}

// Issue 12, bad input: a corrupt and a zero-byte JPEG among the training images of a run that
// augments on the device (--augment-device gpu, the default on CUDA) get the same warnings naming
// the files as on the CPU path (the scan drops them), and the run trains on the other images
// with full batches, on both devices alike.
TEST(DeviceE2E, CorruptImagesInAGpuAugmentedRunWarnAndAreDroppedAsOnTheCpu) {
  Y9_SKIP_WITHOUT_GPU();
  const fs::path root = fs::temp_directory_path() / ("y9_device_e2e_bad_" + std::to_string(::getpid()));
  fs::remove_all(root);
  io::SynthOptions so;
  so.out_dir = (root / "data").string();
  so.n_train = 4;
  so.n_val = 2;
  so.img_size = 64;
  so.seed = 5;
  io::write_synth_dataset(so);
  const fs::path train_dir = root / "data" / "images" / "train";
  fs::path first;
  for (const auto& e : fs::directory_iterator(train_dir))
    if (first.empty() || e.path() < first) first = e.path();
  ASSERT_FALSE(first.empty());
  {  // a JPEG cut in the middle of its entropy-coded data, and an empty one
    std::ifstream in(first, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(train_dir / "zz_corrupt.jpg", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    std::ofstream(train_dir / "zz_empty.jpg", std::ios::binary);
  }
  const std::string data = (root / "data" / "data.yaml").string();
  std::string outs[2];
  int k = 0;
  for (const std::string device : {"cpu", "0"}) {
    const e2e::RunResult r = run("train --cfg " + testutil::source_file("configs/models/gelan-t.yaml") + " --data " +
                                 data + " --img 64 --batch 2 --epochs 1 --workers 0 --seed 0 --noplots --no-amp "
                                 "--device " + device + " --project " + (root / "runs").string() + " --name d" +
                                 device + " --exist-ok");
    ASSERT_EQ(r.rc, 0) << r.out;
    for (const char* f : {"zz_corrupt.jpg", "zz_empty.jpg"}) {
      const size_t at = r.out.find(std::string(f) + ": ");
      ASSERT_NE(at, std::string::npos) << device << ": no warning naming " << f << "\n" << r.out;
      EXPECT_NE(r.out.rfind("WARNING", at), std::string::npos) << r.out;
    }
    EXPECT_NE(r.out.find("(2 batches/epoch"), std::string::npos) << device << ": the 4 good images in full batches\n"
                                                                   << r.out;
    if (device == "0") EXPECT_NE(r.out.find("augment: on cuda:0"), std::string::npos) << r.out;
    // The scan's warning lines, as printed (the same on both devices).
    std::string w;
    std::istringstream ls(r.out);
    for (std::string line; std::getline(ls, line);)
      if (line.find("zz_") != std::string::npos && line.find("WARNING") != std::string::npos) w += line + "\n";
    outs[k++] = w;
  }
  EXPECT_FALSE(outs[0].empty());
  EXPECT_EQ(outs[0], outs[1]);
  if (!::testing::Test::HasFailure()) fs::remove_all(root);
}

}  // namespace
