// Parity of official PyTorch checkpoints read by io/torch_pt with the official code on the same
// files: the checkpoints of scripts/make_pt_fixtures.py (a stripped FP16 yolov9-t, a full last.pt
// of a train_dual.py run with optimizer and EMA, a converted gelan-s, with the official outputs on
// them in reference.json). By default the small set the repository keeps (tests/data/pt/official,
// `make_pt_fixtures.py --tiny`: the same kinds of file from shrunk yolov9-t / gelan-s YAMLs, 160
// px images remade from coco128 by make_tiny_images); with $Y9_PT_FIXTURES, a full-size set made
// by the script outside the repository.
// - detect: our model from the .pt (training::load_model, as `yolov9 detect --weights x.pt`),
//   letterbox, forward and NMS (conf 0.25, IoU 0.45, max_det 1000) against the official
//   detect_dual.py / detect.py pipeline's NMS output: same count, same classes, boxes within 1e-3
//   px (letterboxed-input pixels, before rounding), confidences within 1e-4.
// - val: run_validation (as `yolov9 val --weights x.pt`) against val_dual.py / val.py run() on the
//   fixture's val/ set (conf 0.25, see make_pt_fixtures.py): mAP50 and mAP50-95 within 1e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "apps/training/evaluator.h"
#include "apps/training/weights.h"
#include "engine/autograd.h"
#include "io/augment.h"
#include "io/data_yaml.h"
#include "io/loader.h"
#include "ops/nms.h"
#include "ops/ops.h"
#include "tests/testutil.h"

namespace fs = std::filesystem;
using engine::DType;
using engine::Tensor;

namespace {

std::string fixtures() {
  const char* e = std::getenv("Y9_PT_FIXTURES");
  return e && *e ? std::string(e) : std::string(Y9_SOURCE_DIR) + "/tests/data/pt/official";
}

// reference.json of the fixture folder; a missing, unparsable or incomplete file is an error naming
// it (was: a bare nlohmann parse_error, and a missing key read through const operator[], which is
// undefined behaviour).
nlohmann::json reference() {
  const std::string path = fixtures() + "/reference.json";
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot be read (make it with scripts/make_pt_fixtures.py)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON (" + e.what() + "); remake it with scripts/make_pt_fixtures.py");
  }
  if (!j.is_object() || !j.contains("checkpoints") || !j["checkpoints"].is_object())
    throw std::runtime_error(path + ": no \"checkpoints\" object; remake it with scripts/make_pt_fixtures.py");
  return j;
}

// The tiny set's images (reference "tiny_images": name -> coco128 train2017 file) remade as
// make_pt_fixtures.py --tiny makes them: cv::resize INTER_AREA to 1/4 (the same OpenCV as the
// script's python3-opencv), plus its tiny_noise in [-4, 4], a uint32 hash of (row, column,
// channel); written as PNG (lossless). The repository keeps no COCO pixels.
void make_tiny_images(const nlohmann::json& tiny, const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& [name, src] : tiny.items()) {
    const std::string path = testutil::coco128_dir() + "/images/train2017/" + src.get<std::string>();
    cv::Mat im = cv::imread(path);
    if (im.empty()) throw std::runtime_error(path + ": cannot be read (the tiny .pt fixtures are made from coco128)");
    cv::Mat small;
    cv::resize(im, small, cv::Size(im.cols / 4, im.rows / 4), 0, 0, cv::INTER_AREA);
    for (int y = 0; y < small.rows; ++y)
      for (int x = 0; x < small.cols; ++x)
        for (int c = 0; c < 3; ++c) {
          uint32_t v = static_cast<uint32_t>(y) * 2654435761u + static_cast<uint32_t>(x) * 40503u +
                       static_cast<uint32_t>(c) * 97u + 12345u;
          v ^= v >> 13;
          v *= 1274126177u;
          v ^= v >> 16;
          uint8_t& px = small.ptr<uint8_t>(y)[3 * x + c];
          px = static_cast<uint8_t>(std::clamp(static_cast<int>(px) + static_cast<int>(v % 9) - 4, 0, 255));
        }
    if (!cv::imwrite((dir / name).string(), small)) throw std::runtime_error("cannot write " + (dir / name).string());
  }
}

// A copy of the fixture's val/ folder in a temporary folder (the dataset scan writes labels.cache
// beside the labels, as the official one does, and the fixture folder may be the source tree),
// with the tiny set's images remade into val/images. The detect test reads its images there too.
fs::path val_copy(const nlohmann::json& all, const std::string& tag) {
  const fs::path val = fs::path(::testing::TempDir()) / ("torch_pt_ref_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(val);
  fs::copy(fixtures() + "/val", val, fs::copy_options::recursive);
  if (all.contains("tiny_images")) make_tiny_images(all["tiny_images"], val / "images");
  return val;
}

// The fixture folder has a reference.json; the tiny set also needs coco128 (skip without it, as
// the other coco128 tests do; with Y9_REQUIRE_REFERENCE=1, as in CI, coco128_dir() throws).
#define Y9_PT_FIXTURES_PRESENT()                                                                         \
  do {                                                                                                   \
    ASSERT_TRUE(fs::exists(fixtures() + "/reference.json")) << fixtures() << " has no reference.json";   \
    if (reference().contains("tiny_images") && testutil::coco128_dir().empty())                          \
      GTEST_SKIP() << "coco128 not found (../shared/data/coco128): the tiny .pt fixtures' images come from it"; \
  } while (0)

// Letterboxed [1, 3, H, W] F32 RGB / 255 at size `img`, as the detect loop builds it.
Tensor letterboxed(const std::string& path, int img) {
  cv::Mat im0 = cv::imread(path);
  EXPECT_FALSE(im0.empty()) << path;
  io::LetterboxResult lb = io::letterbox(im0, img, img, /*auto_pad=*/true, false, true, 32);
  cv::Mat rgb;
  cv::cvtColor(lb.img, rgb, cv::COLOR_BGR2RGB);
  const int H = rgb.rows, W = rgb.cols;
  Tensor t = Tensor::empty({1, 3, H, W}, DType::F32);
  float* d = t.data<float>();
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c)
        d[(static_cast<int64_t>(c) * H + y) * W + x] = rgb.ptr<uint8_t>(y)[3 * x + c] / 255.0f;
  return t;
}

class TorchPtRef : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchPtRef, DetectMatchesOfficial) {
  Y9_PT_FIXTURES_PRESENT();
  const nlohmann::json all = reference();
  const nlohmann::json ref = all.at("checkpoints").at(GetParam());
  const int img = all.value("img", 640);
  // The full-size set keeps its images in images/; the tiny set's are remade (make_tiny_images).
  const fs::path val = all.contains("tiny_images") ? val_copy(all, "detect") : fs::path();
  const std::string images = all.contains("tiny_images") ? (val / "images").string() + "/" : fixtures() + "/images/";
  training::LoadedModel lm = training::load_model(fixtures() + "/" + GetParam());
  training::Predictor pred = training::model_predictor(*lm.model);
  ops::NmsOptions nms;
  nms.conf_thres = 0.25;
  nms.iou_thres = 0.45;
  nms.max_det = 1000;
  double max_box = 0, max_conf = 0;
  int64_t boxes = 0;
  for (const auto& [image, r] : ref["detect"].items()) {
    Tensor im = letterboxed(images + image, img);
    ASSERT_EQ(im.size(2), r["shape"][2].get<int64_t>()) << image;
    ASSERT_EQ(im.size(3), r["shape"][3].get<int64_t>()) << image;
    io::Batch b;
    b.paths = {image};
    b.indices = {0};
    b.targets = Tensor::zeros({0, 6});
    Tensor det = ops::non_max_suppression(pred(im, b), nms)[0].to(DType::F32).contiguous();
    const auto& want = r["det"];
    const float* d = det.data<float>();
    std::string listing;  // both lists, for a failure message
    for (int64_t i = 0; i < std::max<int64_t>(det.size(0), want.size()); ++i) {
      char buf[256];
      if (i < det.size(0))
        std::snprintf(buf, sizeof buf, "ours %8.3f %8.3f %8.3f %8.3f %.6f %2.0f", d[6 * i], d[6 * i + 1], d[6 * i + 2],
                      d[6 * i + 3], d[6 * i + 4], d[6 * i + 5]);
      else
        std::snprintf(buf, sizeof buf, "%-60s", "ours -");
      listing += buf;
      if (i < static_cast<int64_t>(want.size()))
        std::snprintf(buf, sizeof buf, " | official %8.3f %8.3f %8.3f %8.3f %.6f %2.0f\n", want[i][0].get<double>(),
                      want[i][1].get<double>(), want[i][2].get<double>(), want[i][3].get<double>(),
                      want[i][4].get<double>(), want[i][5].get<double>());
      else
        std::snprintf(buf, sizeof buf, " | official -\n");
      listing += buf;
    }
    ASSERT_EQ(det.size(0), static_cast<int64_t>(want.size())) << GetParam() << " " << image << "\n" << listing;
    for (size_t i = 0; i < want.size(); ++i) {
      for (int k = 0; k < 4; ++k) max_box = std::max(max_box, std::abs(d[6 * i + k] - want[i][k].get<double>()));
      max_conf = std::max(max_conf, std::abs(d[6 * i + 4] - want[i][4].get<double>()));
      EXPECT_EQ(static_cast<int64_t>(d[6 * i + 5]), static_cast<int64_t>(want[i][5].get<double>()))
          << GetParam() << " " << image << " box " << i << "\n"
          << listing;
    }
    boxes += det.size(0);
  }
  std::printf("%s: %lld boxes, max box diff %.3g px, max conf diff %.3g\n", GetParam().c_str(),
              static_cast<long long>(boxes), max_box, max_conf);
  EXPECT_GT(boxes, 0);
  EXPECT_LE(max_box, 1e-3);
  EXPECT_LE(max_conf, 1e-4);
  if (!val.empty()) fs::remove_all(val);
}

TEST_P(TorchPtRef, ValMatchesOfficial) {
  Y9_PT_FIXTURES_PRESENT();
  const nlohmann::json all = reference();
  const nlohmann::json ref = all.at("checkpoints").at(GetParam()).at("val");
  const fs::path val = val_copy(all, "val");
  io::DataConfig data = io::load_data_yaml((val / "data.yaml").string());
  training::LoadedModel lm = training::load_model(fixtures() + "/" + GetParam(), "", data.nc);
  training::ValOptions o;
  o.batch_size = 2;
  o.workers = 0;
  o.names = data.names;
  o.plots = false;
  o.conf_thres = all["val_conf_thres"].get<double>();  // as the official run (make_pt_fixtures.py)
  auto ds = training::make_val_dataset(data.val, all.value("img", 640), 2, /*rect=*/true, 0.5, data.nc, false, 0, "");
  training::ValResult r = training::run_validation(*lm.model, ds, o);
  std::printf("%s: mAP50 %.6f (official %.6f, diff %.2g), mAP50-95 %.6f (official %.6f, diff %.2g), P %.6f (%.6f), "
              "R %.6f (%.6f)\n",
              GetParam().c_str(), r.metrics.map50, ref["map50"].get<double>(),
              std::abs(r.metrics.map50 - ref["map50"].get<double>()), r.metrics.map, ref["map"].get<double>(),
              std::abs(r.metrics.map - ref["map"].get<double>()), r.metrics.mp, ref["mp"].get<double>(), r.metrics.mr,
              ref["mr"].get<double>());
  fs::remove_all(val);
  EXPECT_GT(r.metrics.map50, 0.05);  // the labels are the model's own detections, jittered
  EXPECT_NEAR(r.metrics.map50, ref["map50"].get<double>(), 1e-4);
  EXPECT_NEAR(r.metrics.map, ref["map"].get<double>(), 1e-4);
  EXPECT_NEAR(r.metrics.mp, ref["mp"].get<double>(), 1e-4);
  EXPECT_NEAR(r.metrics.mr, ref["mr"].get<double>(), 1e-4);
}

// A broken reference.json fails with a message naming the file and what is wrong with it.
TEST(TorchPtRefFixtures, BrokenReferenceJsonNamesTheFile) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("torch_pt_ref_broken_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string old = std::getenv("Y9_PT_FIXTURES") ? std::getenv("Y9_PT_FIXTURES") : "";
  ::setenv("Y9_PT_FIXTURES", dir.c_str(), 1);
  auto message = []() -> std::string {
    try {
      reference();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string file = (dir / "reference.json").string();
  const std::string missing = message();
  std::ofstream(file) << "{\"img\": 160, \"checkp";
  const std::string corrupt = message();
  std::ofstream(file) << "{}";
  const std::string empty = message();
  if (old.empty()) ::unsetenv("Y9_PT_FIXTURES");
  else ::setenv("Y9_PT_FIXTURES", old.c_str(), 1);
  fs::remove_all(dir);
  EXPECT_NE(missing.find(file), std::string::npos) << missing;
  EXPECT_NE(corrupt.find(file), std::string::npos) << corrupt;
  EXPECT_NE(empty.find(file), std::string::npos) << empty;
  EXPECT_NE(empty.find("checkpoints"), std::string::npos) << empty;
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, TorchPtRef,
                         ::testing::Values("yolov9-t-stripped.pt", "last.pt", "gelan-s-converted.pt"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

}  // namespace
