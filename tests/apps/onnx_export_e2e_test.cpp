// `yolov9 export --format onnx` end to end: gelan-t and yolov9-t weights (random init with random
// BatchNorm statistics and class biases, so that fusion and NMS have work to do) are exported,
// the file runs in OpenCV's DNN module and in onnxruntime (PyPI; skipped when python3 lacks it),
// and the outputs are compared with the engine's own eval forward of the same re-parameterised,
// fused model (FP32, --half, --dynamic at two sizes, and --nms against ops::non_max_suppression).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <sstream>
#include <string>
#include <vector>
#if Y9_HAVE_OPENCV_DNN
#include <opencv2/dnn.hpp>
#endif

#include "apps/training/weights.h"
#include "engine/autograd.h"
#include "graph/fuse.h"
#include "graph/model.h"
#include "io/synth.h"
#include "ops/nms.h"
#include "tests/testutil.h"

namespace fs = std::filesystem;
using engine::Tensor;

namespace {

std::string bin() { return std::string(Y9_BINARY_DIR) + "/yolov9"; }
std::string cfg(const std::string& name) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + name; }

int run(const std::string& cmd, const std::string& log) {
  int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct Dir {
  fs::path p;
  explicit Dir(const std::string& name)
      : p(fs::temp_directory_path() / ("y9_onnx_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(p);
    fs::create_directories(p);
  }
  ~Dir() {
    if (!std::getenv("Y9_KEEP_TEST_FILES")) fs::remove_all(p);
  }
  std::string operator/(const std::string& f) const { return (p / f).string(); }
};

// Random init (seed 1), then BatchNorm statistics and affine parameters and the class biases
// randomised so that Conv+BN folding changes the weights and some class scores pass 0.25.
std::shared_ptr<graph::Model> make_weights(const std::string& cfg_name, const std::string& path) {
  graph::BuildOptions bo;
  bo.seed = 1;
  auto m = graph::Model::from_yaml(cfg(cfg_name), 3, bo);
  engine::autograd::NoGradGuard ng;
  uint64_t seed = 100;
  for (auto& [name, mod] : m->named_modules()) {
    if (auto* bn = dynamic_cast<graph::BatchNorm2d*>(mod)) {
      bn->weight.copy_(testutil::random_tensor({bn->c}, ++seed, 0.5, 1.5, engine::DType::F32));
      bn->bias.copy_(testutil::random_tensor({bn->c}, ++seed, -0.2, 0.2, engine::DType::F32));
      bn->running_mean.copy_(testutil::random_tensor({bn->c}, ++seed, -0.2, 0.2, engine::DType::F32));
      bn->running_var.copy_(testutil::random_tensor({bn->c}, ++seed, 0.5, 2.0, engine::DType::F32));
    }
  }
  graph::Detect* d = m->head();
  for (auto& branch : d->cls_seq)
    for (auto& seq : branch) {
      auto* c = dynamic_cast<graph::Conv2d*>(seq->items.back().get());
      c->bias.copy_(testutil::random_tensor({c->c2}, ++seed, -4.0, 1.5, engine::DType::F32));
    }
  training::save_model_weights(*m, path);
  return m;
}

// The engine's inference model for the exported graph: re-parameterised (dual heads) and fused.
std::shared_ptr<graph::Model> fused_model(const std::string& cfg_name, const std::string& weights) {
  graph::BuildOptions bo;
  bo.init = false;
  auto m = graph::Model::from_yaml(cfg(cfg_name), 3, bo);
  training::load_weights(*m, weights);
  m->eval();
  if (m->head()->branches > 1) {
    const std::string gelan = "gelan-" + cfg_name.substr(7);
    m = graph::reparameterize(*m, graph::load_model_config(cfg(gelan), 3));
  }
  graph::fuse(*m);
  m->eval();
  return m;
}

Tensor forward(graph::Model& m, const Tensor& x) {
  engine::autograd::NoGradGuard ng;
  return m.forward(x).decoded.back().contiguous();
}

struct Diff {
  double box = 0, score = 0;  // max |a - b| over the box rows (px) and the class-score rows
};

// a, b: [B, 4 + nc, A] float32.
Diff max_diff(const std::vector<float>& a, const Tensor& ref) {
  const auto r = ref.to_vector<float>();
  EXPECT_EQ(a.size(), r.size());
  const int64_t B = ref.size(0), R = ref.size(1), A = ref.size(2);
  Diff d;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t row = 0; row < R; ++row)
      for (int64_t i = 0; i < A && static_cast<size_t>((b * R + row) * A + i) < a.size(); ++i) {
        const size_t k = static_cast<size_t>((b * R + row) * A + i);
        double& m = row < 4 ? d.box : d.score;
        m = std::max(m, static_cast<double>(std::fabs(a[k] - r[k])));
      }
  return d;
}

// Largest |a - b| / max(1, |b|): the FP32 check (1e-4 absolute for scores and coordinates below 1
// px, relative above: float32 spacing at 640 px is 6e-5, so an absolute 1e-4 on pixel coordinates
// would test the rounding of the last op rather than the graph).
double max_scaled_diff(const std::vector<float>& a, const Tensor& ref) {
  const auto r = ref.to_vector<float>();
  double m = 0;
  for (size_t k = 0; k < std::min(a.size(), r.size()); ++k)
    m = std::max(m, std::fabs(static_cast<double>(a[k]) - r[k]) / std::max(1.0, std::fabs(static_cast<double>(r[k]))));
  return m;
}

// Image side of the FP32 and --half checks: 160, or Y9_ONNX_TEST_IMG (e.g. 640 for the deployment size).
int64_t test_img() {
  const char* v = std::getenv("Y9_ONNX_TEST_IMG");
  return v ? std::stoll(v) : 160;
}
std::string num_anchors(int64_t img) {
  return std::to_string((img / 8) * (img / 8) + (img / 16) * (img / 16) + (img / 32) * (img / 32));
}

bool have_ort() { return std::system("python3 -c 'import onnxruntime' > /dev/null 2>&1") == 0; }

// Runs `model` in onnxruntime on x; returns output name -> (values as float, or int32 bits).
struct OrtOut {
  std::vector<float> f;
  std::vector<int32_t> i;
  std::vector<int64_t> shape;
};
std::map<std::string, OrtOut> run_ort(const std::string& model, const Tensor& x, const Dir& dir,
                                      const std::vector<std::string>& names, const std::vector<bool>& is_int) {
  const std::string in = dir / "input.f32";
  {
    const auto v = x.contiguous().to_vector<float>();
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  }
  std::string shape;
  for (int64_t k = 0; k < x.dim(); ++k) shape += (k ? "," : "") + std::to_string(x.size(k));
  const std::string log = dir / "ort.log";
  const int rc = run("python3 " + std::string(Y9_SOURCE_DIR) + "/tests/apps/onnx_ort_run.py " + model + " " + in + " " +
                         shape + " " + dir.p.string(),
                     log);
  EXPECT_EQ(rc, 0) << slurp(log);
  std::map<std::string, OrtOut> out;
  for (size_t n = 0; n < names.size(); ++n) {
    OrtOut o;
    std::stringstream ss(slurp(dir / (names[n] + ".shape")));
    for (std::string t; std::getline(ss, t, ',');) o.shape.push_back(std::stoll(t));
    std::ifstream f(dir / (names[n] + ".bin"), std::ios::binary);
    const std::string raw((std::istreambuf_iterator<char>(f)), {});
    if (is_int[n]) {
      o.i.resize(raw.size() / 4);
      std::memcpy(o.i.data(), raw.data(), raw.size());
    } else {
      o.f.resize(raw.size() / 4);
      std::memcpy(o.f.data(), raw.data(), raw.size());
    }
    out[names[n]] = o;
  }
  return out;
}

#if Y9_HAVE_OPENCV_DNN
std::vector<float> run_opencv(const std::string& model, const Tensor& x) {
  cv::dnn::Net net = cv::dnn::readNetFromONNX(model);
  net.setPreferableBackend(cv::dnn::DNN_BACKEND_OPENCV);
  net.setPreferableTarget(cv::dnn::DNN_TARGET_CPU);
  std::vector<int> sz;
  for (int64_t k = 0; k < x.dim(); ++k) sz.push_back(static_cast<int>(x.size(k)));
  auto v = x.contiguous().to_vector<float>();
  cv::Mat blob(static_cast<int>(sz.size()), sz.data(), CV_32F, v.data());
  net.setInput(blob, "images");
  cv::Mat out = net.forward("output0");
  return std::vector<float>(out.ptr<float>(), out.ptr<float>() + out.total());
}
#endif

class OnnxExportE2E : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
#if !Y9_WITH_ONNX
    GTEST_SKIP() << "this build has no ONNX export (libonnx-dev, libprotobuf-dev)";
#endif
  }
};

std::string export_cmd(const std::string& w, const std::string& c, const std::string& out, const std::string& extra) {
  return bin() + " export --weights " + w + " --cfg " + cfg(c) + " --nc 3 --format onnx --out " + out + " " + extra;
}

}  // namespace

// FP32 static graph (batch 2): OpenCV DNN and onnxruntime against the engine within 1e-4.
TEST_P(OnnxExportE2E, Fp32MatchesOpenCvAndOnnxRuntime) {
  const std::string c = std::string(GetParam()) + ".yaml";
  Dir dir(std::string("fp32_") + GetParam());
  make_weights(c, dir / "w.safetensors");
  const std::string onnx = dir / "m.onnx", log = dir / "log.txt";
  const int64_t img = test_img();
  ASSERT_EQ(
      run(export_cmd(dir / "w.safetensors", c, onnx, "--imgsz " + std::to_string(img) + " --batch-size 2 --simplify"),
          log),
      0)
      << slurp(log);
  EXPECT_NE(slurp(log).find("output0 float32 [2, 7, " + num_anchors(img) + "]"), std::string::npos) << slurp(log);
  auto m = fused_model(c, dir / "w.safetensors");
  Tensor x = testutil::random_tensor({2, 3, img, img}, 5, 0.0, 1.0, engine::DType::F32);
  Tensor ref = forward(*m, x);
#if Y9_HAVE_OPENCV_DNN
  {
    const auto y = run_opencv(onnx, x);
    const Diff d = max_diff(y, ref);
    std::printf("[%s fp32 OpenCV DNN] max |diff| boxes %.3g px, scores %.3g; scaled %.3g\n", GetParam(), d.box, d.score,
                max_scaled_diff(y, ref));
    EXPECT_LE(max_scaled_diff(y, ref), 1e-4);
    EXPECT_LE(d.score, 1e-4);
  }
#else
  std::printf("OpenCV DNN not available in this build: its check is skipped\n");
#endif
  if (!have_ort()) GTEST_SKIP() << "python3 onnxruntime not installed (python3 -m pip install onnxruntime)";
  auto o = run_ort(onnx, x, dir, {"output0"}, {false});
  const Diff d = max_diff(o["output0"].f, ref);
  std::printf("[%s fp32 onnxruntime] max |diff| boxes %.3g px, scores %.3g; scaled %.3g\n", GetParam(), d.box, d.score,
              max_scaled_diff(o["output0"].f, ref));
  EXPECT_LE(max_scaled_diff(o["output0"].f, ref), 1e-4);
  EXPECT_LE(d.score, 1e-4);
}

// --half: FP16 weights and I/O. FP16 keeps 11 significant bits and the graph computes in FP16
// end to end, so the tolerance is 2^-10 relative per op compounded over ~100 layers: we check
// 2 % of max(1, |ref|) and print the numbers.
// OpenCV 4.6's importer cannot read FP16 initializers ("Unsupported data type: FLOAT16"); its
// FP16 path is an FP32 file with DNN_TARGET_*_FP16, so only onnxruntime runs the --half file.
TEST_P(OnnxExportE2E, HalfRunsInOnnxRuntime) {
  const std::string c = std::string(GetParam()) + ".yaml";
  Dir dir(std::string("half_") + GetParam());
  make_weights(c, dir / "w.safetensors");
  const std::string onnx = dir / "m.onnx", log = dir / "log.txt";
  const int64_t img = test_img();
  ASSERT_EQ(run(export_cmd(dir / "w.safetensors", c, onnx, "--imgsz " + std::to_string(img) + " --half"), log), 0)
      << slurp(log);
  const std::string is = std::to_string(img);
  EXPECT_NE(slurp(log).find("images float16 [1, 3, " + is + ", " + is + "]"), std::string::npos) << slurp(log);
  auto m = fused_model(c, dir / "w.safetensors");
  Tensor x = testutil::random_tensor({1, 3, img, img}, 5, 0.0, 1.0, engine::DType::F32);
  Tensor ref = forward(*m, x);
  if (!have_ort()) GTEST_SKIP() << "python3 onnxruntime not installed";
  auto o = run_ort(onnx, x, dir, {"output0"}, {false});
  const Diff d = max_diff(o["output0"].f, ref);
  std::printf("[%s fp16 onnxruntime] max |diff| boxes %.3g px, scores %.3g; scaled %.3g\n", GetParam(), d.box, d.score,
              max_scaled_diff(o["output0"].f, ref));
  EXPECT_LE(max_scaled_diff(o["output0"].f, ref), 2e-2);
}

// --dynamic: one file, two batch/size combinations, against the engine.
TEST_P(OnnxExportE2E, DynamicTwoSizes) {
  const std::string c = std::string(GetParam()) + ".yaml";
  Dir dir(std::string("dyn_") + GetParam());
  make_weights(c, dir / "w.safetensors");
  const std::string onnx = dir / "m.onnx", log = dir / "log.txt";
  ASSERT_EQ(run(export_cmd(dir / "w.safetensors", c, onnx, "--dynamic"), log), 0) << slurp(log);
  EXPECT_NE(slurp(log).find("output0 float32 [batch, 7, anchors]"), std::string::npos) << slurp(log);
  if (!have_ort()) GTEST_SKIP() << "python3 onnxruntime not installed";
  auto m = fused_model(c, dir / "w.safetensors");
  const std::vector<std::vector<int64_t>> sizes{{2, 3, 128, 160}, {1, 3, 224, 96}};
  for (const auto& s : sizes) {
    Tensor x = testutil::random_tensor(s, 9, 0.0, 1.0, engine::DType::F32);
    Tensor ref = forward(*m, x);
    auto o = run_ort(onnx, x, dir, {"output0"}, {false});
    ASSERT_EQ(o["output0"].shape, ref.shape());
    const Diff d = max_diff(o["output0"].f, ref);
    std::printf("[%s dynamic %lldx3x%lldx%lld onnxruntime] max |diff| boxes %.3g px, scores %.3g; scaled %.3g\n",
                GetParam(), static_cast<long long>(s[0]), static_cast<long long>(s[2]), static_cast<long long>(s[3]),
                d.box, d.score, max_scaled_diff(o["output0"].f, ref));
    EXPECT_LE(max_scaled_diff(o["output0"].f, ref), 1e-4);
  }
}

// --nms: EfficientNMS-style outputs against ops::non_max_suppression (detect defaults, max_det =
// K). The exact check runs our NMS on onnxruntime's own prediction (the same file without --nms):
// random-init weights predict many near-identical boxes whose scores tie to 1e-7, so greedy NMS
// on the engine's prediction (which differs by float rounding) may keep a different one of two
// tied boxes; that agreement is printed, not asserted.
TEST_P(OnnxExportE2E, NmsMatchesOurNms) {
  const std::string c = std::string(GetParam()) + ".yaml";
  Dir dir(std::string("nms_") + GetParam());
  make_weights(c, dir / "w.safetensors");
  if (!have_ort()) GTEST_SKIP() << "python3 onnxruntime not installed";
  auto m = fused_model(c, dir / "w.safetensors");
  Tensor x = testutil::random_tensor({2, 3, 160, 160}, 21, 0.0, 1.0, engine::DType::F32);
  ops::NmsOptions no;
  no.conf_thres = 0.25;
  no.iou_thres = 0.45;
  no.max_det = 100;
  const auto engine_dets = ops::non_max_suppression(forward(*m, x), no);
  const std::vector<std::pair<std::string, std::string>> variants{{"static", "--imgsz 160 --batch-size 2"},
                                                                  {"dynamic", "--dynamic"},
                                                                  {"half", "--imgsz 160 --batch-size 2 --half"}};
  for (const auto& [what, flags] : variants) {
    const std::string plain = dir / (what + ".onnx"), with_nms = dir / (what + "_nms.onnx"), log = dir / "log.txt";
    ASSERT_EQ(run(export_cmd(dir / "w.safetensors", c, plain, flags), log), 0) << slurp(log);
    ASSERT_EQ(run(export_cmd(dir / "w.safetensors", c, with_nms, flags + " --nms"), log), 0) << slurp(log);
    EXPECT_NE(slurp(log).find(what == "dynamic" ? "boxes float32 [batch, 100, 4]"
                              : what == "half"  ? "boxes float16 [2, 100, 4]"
                                                : "boxes float32 [2, 100, 4]"),
              std::string::npos)
        << slurp(log);
    auto p = run_ort(plain, x, dir, {"output0"}, {false});
    const auto ours = ops::non_max_suppression(Tensor::from_vector(p["output0"].f, p["output0"].shape), no);
    auto o = run_ort(with_nms, x, dir, {"num_dets", "boxes", "scores", "classes"}, {true, false, false, true});
    ASSERT_EQ(o["num_dets"].shape, (std::vector<int64_t>{2, 1}));
    ASSERT_EQ(o["boxes"].shape, (std::vector<int64_t>{2, 100, 4}));
    ASSERT_EQ(o["classes"].shape, (std::vector<int64_t>{2, 100}));
    const double box_tol = what == "half" ? 0.125 : 1e-4;  // FP16 boxes: half an ulp at 256 px
    double max_box = 0, max_score = 0;
    int64_t total = 0, class_mismatch = 0, engine_total = 0, engine_match = 0;
    for (int64_t b = 0; b < 2; ++b) {
      const auto dv = ours[static_cast<size_t>(b)].contiguous().to_vector<float>();
      const auto n = static_cast<int64_t>(dv.size() / 6);
      total += n;
      ASSERT_GT(n, 0) << "no detections: the test weights should give some";
      ASSERT_EQ(o["num_dets"].i[static_cast<size_t>(b)], n) << what << " image " << b;
      for (int64_t r = 0; r < 100; ++r) {
        const size_t row = static_cast<size_t>(b * 100 + r);
        if (r >= n) {  // padding rows are zero
          EXPECT_EQ(o["scores"].f[row], 0.f);
          EXPECT_EQ(o["classes"].i[row], 0);
          for (int k = 0; k < 4; ++k) EXPECT_EQ(o["boxes"].f[row * 4 + k], 0.f);
          continue;
        }
        for (int k = 0; k < 4; ++k)
          max_box = std::max(
              max_box, static_cast<double>(std::fabs(o["boxes"].f[row * 4 + k] - dv[static_cast<size_t>(r * 6 + k)])));
        max_score = std::max(max_score,
                             static_cast<double>(std::fabs(o["scores"].f[row] - dv[static_cast<size_t>(r * 6 + 4)])));
        class_mismatch += o["classes"].i[row] != static_cast<int32_t>(dv[static_cast<size_t>(r * 6 + 5)]);
      }
      // Agreement with NMS on the engine's own prediction: ONNX rows with an engine detection of
      // the same class within 0.01 px (FP32 variants; FP16 moves boxes by up to 0.1 px).
      const auto ev = engine_dets[static_cast<size_t>(b)].contiguous().to_vector<float>();
      engine_total += static_cast<int64_t>(ev.size() / 6);
      for (int64_t r = 0; r < o["num_dets"].i[static_cast<size_t>(b)]; ++r) {
        const size_t row = static_cast<size_t>(b * 100 + r);
        for (size_t q = 0; q < ev.size() / 6; ++q) {
          bool same = o["classes"].i[row] == static_cast<int32_t>(ev[q * 6 + 5]);
          for (int k = 0; k < 4 && same; ++k)
            same = std::fabs(o["boxes"].f[row * 4 + k] - ev[q * 6 + k]) < (what == "half" ? 0.5 : 0.01);
          if (same) {
            ++engine_match;
            break;
          }
        }
      }
    }
    std::printf(
        "[%s --nms %s onnxruntime] %lld detections in 2 images, equal to our NMS on its prediction: max |diff| "
        "boxes %.3g px, scores %.3g, class mismatches %lld; vs our NMS on the engine's prediction: %lld of %lld "
        "matched\n",
        GetParam(), what.c_str(), static_cast<long long>(total), max_box, max_score,
        static_cast<long long>(class_mismatch), static_cast<long long>(engine_match),
        static_cast<long long>(engine_total));
    EXPECT_EQ(class_mismatch, 0);
    EXPECT_LE(max_box, box_tol);
    EXPECT_LE(max_score, what == "half" ? 1e-3 : 1e-6);
  }
}

// The opset range: the oldest and newest opsets give the same numbers.
TEST_P(OnnxExportE2E, OpsetRange) {
  const std::string c = std::string(GetParam()) + ".yaml";
  Dir dir(std::string("opset_") + GetParam());
  make_weights(c, dir / "w.safetensors");
  if (!have_ort()) GTEST_SKIP() << "python3 onnxruntime not installed";
  auto m = fused_model(c, dir / "w.safetensors");
  Tensor x = testutil::random_tensor({1, 3, 96, 128}, 3, 0.0, 1.0, engine::DType::F32);
  Tensor ref = forward(*m, x);
  for (const char* opset : {"13", "19"}) {
    const std::string onnx = dir / "m.onnx", log = dir / "log.txt";
    ASSERT_EQ(run(export_cmd(dir / "w.safetensors", c, onnx, std::string("--imgsz 96 128 --opset ") + opset), log), 0)
        << slurp(log);
    auto o = run_ort(onnx, x, dir, {"output0"}, {false});
    std::printf("[%s opset %s onnxruntime] scaled max diff %.3g\n", GetParam(), opset,
                max_scaled_diff(o["output0"].f, ref));
    EXPECT_LE(max_scaled_diff(o["output0"].f, ref), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, OnnxExportE2E, ::testing::Values("gelan-t", "yolov9-t"));

TEST(OnnxExportE2E, BadFlagsAreClearErrors) {
#if !Y9_WITH_ONNX
  GTEST_SKIP() << "this build has no ONNX export";
#endif
  Dir dir("bad");
  make_weights("gelan-t.yaml", dir / "w.safetensors");
  const std::string log = dir / "log.txt";
  EXPECT_NE(run(export_cmd(dir / "w.safetensors", "gelan-t.yaml", dir / "m.onnx", "--imgsz 100"), log), 0);
  EXPECT_NE(slurp(log).find("multiple of the grid stride"), std::string::npos) << slurp(log);
  EXPECT_NE(run(export_cmd(dir / "w.safetensors", "gelan-t.yaml", dir / "m.onnx", "--opset 11"), log), 0);
  EXPECT_NE(run(bin() + " export --weights " + (dir / "w.safetensors") + " --format tflite --out x", log), 0);
}

// Trained weights (a 6-epoch `yolov9 train` of gelan-t on a synthetic set, as the other e2e tests
// train): predictions are no longer degenerate, so NMS inside the file must give the boxes of our
// NMS on the engine's own prediction, on real images (OpenCV DNN and onnxruntime for output0).
TEST(OnnxExportE2E, TrainedGelanTOnImages) {
#if !Y9_WITH_ONNX
  GTEST_SKIP() << "this build has no ONNX export";
#endif
  Dir dir("trained");
  io::SynthOptions so;
  so.out_dir = dir / "data";
  so.n_train = 64;
  so.n_val = 4;
  so.img_size = 128;
  so.seed = 3;
  io::write_synth_dataset(so);
  const std::string log = dir / "log.txt";
  ASSERT_EQ(run("OMP_NUM_THREADS=2 " + bin() + " train --cfg gelan-t.yaml --data " + (dir / "data") +
                    "/data.yaml --img 128 --batch 16 --epochs 6 --workers 1 --project " + (dir / "runs") +
                    " --name t --exist-ok",
                log),
            0)
      << slurp(log);
  const std::string best = dir / "runs/t/weights/best.safetensors", plain = dir / "plain.safetensors";
  ASSERT_EQ(run(bin() + " export --weights " + best + " --out " + plain, log), 0) << slurp(log);
  ASSERT_EQ(
      run(bin() + " export --weights " + best + " --format onnx --imgsz 128 --batch-size 4 --out " + (dir / "p.onnx"),
          log),
      0)
      << slurp(log);
  ASSERT_EQ(run(bin() + " export --weights " + best +
                    " --format onnx --imgsz 128 --batch-size 4 --nms --conf-thres 0.001 --out " + (dir / "n.onnx"),
                log),
            0)
      << slurp(log);
  // The 4 validation images (128 x 128, RGB in [0, 1], NCHW).
  std::vector<float> pix;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir.p / "data" / "images" / "val")) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 4u);
  for (const auto& f : files) {
    cv::Mat bgr = cv::imread(f), rgb;
    ASSERT_EQ(bgr.rows, 128);
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 128; ++y)
        for (int x = 0; x < 128; ++x) pix.push_back(rgb.at<cv::Vec3b>(y, x)[c] / 255.f);
  }
  const Tensor x = Tensor::from_vector(pix, {4, 3, 128, 128});
  auto m = fused_model("gelan-t.yaml", plain);
  const Tensor ref = forward(*m, x);
#if Y9_HAVE_OPENCV_DNN
  {
    const auto y = run_opencv(dir / "p.onnx", x);
    const Diff d = max_diff(y, ref);
    std::printf("[trained gelan-t fp32 OpenCV DNN] max |diff| boxes %.3g px, scores %.3g; scaled %.3g\n", d.box,
                d.score, max_scaled_diff(y, ref));
    EXPECT_LE(max_scaled_diff(y, ref), 1e-4);
  }
#endif
  if (!have_ort()) GTEST_SKIP() << "python3 onnxruntime not installed";
  auto p = run_ort(dir / "p.onnx", x, dir, {"output0"}, {false});
  const Diff d = max_diff(p["output0"].f, ref);
  std::printf("[trained gelan-t fp32 onnxruntime] max |diff| boxes %.3g px, scores %.3g; scaled %.3g\n", d.box, d.score,
              max_scaled_diff(p["output0"].f, ref));
  EXPECT_LE(max_scaled_diff(p["output0"].f, ref), 1e-4);

  ops::NmsOptions no;
  no.conf_thres = 0.001;
  no.max_det = 100;
  const auto ours = ops::non_max_suppression(ref, no);
  auto o = run_ort(dir / "n.onnx", x, dir, {"num_dets", "boxes", "scores", "classes"}, {true, false, false, true});
  // Row by row, except that two detections whose scores tie within float rounding may come in
  // either order (the engine's fused conv + SiLU and onnxruntime round differently): each of our
  // rows is matched to the unused exported row of the same class nearest to it among the rows
  // at most 1e-5 apart in score.
  double max_box = 0, max_score = 0;
  int64_t total = 0;
  for (int64_t b = 0; b < 4; ++b) {
    const auto dv = ours[static_cast<size_t>(b)].contiguous().to_vector<float>();
    const auto n = static_cast<int64_t>(dv.size() / 6);
    total += n;
    ASSERT_EQ(o["num_dets"].i[static_cast<size_t>(b)], n) << "image " << b;
    std::vector<bool> used(static_cast<size_t>(n), false);
    for (int64_t r = 0; r < n; ++r) {
      int64_t best = -1;
      double best_box = 0;
      for (int64_t q = 0; q < n; ++q) {
        const size_t row = static_cast<size_t>(b * 100 + q);
        if (used[static_cast<size_t>(q)] ||
            o["classes"].i[row] != static_cast<int32_t>(dv[static_cast<size_t>(r * 6 + 5)]) ||
            std::fabs(o["scores"].f[row] - dv[static_cast<size_t>(r * 6 + 4)]) > 1e-5)
          continue;
        double box = 0;
        for (int k = 0; k < 4; ++k)
          box = std::max(box,
                         static_cast<double>(std::fabs(o["boxes"].f[row * 4 + k] - dv[static_cast<size_t>(r * 6 + k)])));
        if (best < 0 || box < best_box) best = q, best_box = box;
      }
      ASSERT_GE(best, 0) << "image " << b << " row " << r << ": no exported detection of class "
                         << dv[static_cast<size_t>(r * 6 + 5)] << " with score " << dv[static_cast<size_t>(r * 6 + 4)];
      used[static_cast<size_t>(best)] = true;
      const size_t row = static_cast<size_t>(b * 100 + best);
      max_box = std::max(max_box, best_box);
      max_score =
          std::max(max_score, static_cast<double>(std::fabs(o["scores"].f[row] - dv[static_cast<size_t>(r * 6 + 4)])));
    }
  }
  std::printf(
      "[trained gelan-t --nms onnxruntime vs our NMS on the engine's prediction] %lld detections in 4 images, "
      "max |diff| boxes %.3g px, scores %.3g\n",
      static_cast<long long>(total), max_box, max_score);
  EXPECT_GT(total, 0);
  EXPECT_LE(max_box, 1e-3);
  EXPECT_LE(max_score, 1e-5);
}
