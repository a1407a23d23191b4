// End-to-end tests of validation: training::run_validation on a tiny synthetic dataset with a random
// gelan-t (table, confusion matrix, batch mosaics) and with a noisy "ground-truth" predictor
// (non-trivial mAP, curves, COCO JSON and YOLO txt outputs checked against the labels), the
// `yolov9 val` command line (dual-head yolov9-t checkpoint with EMA tensors), a missing weights
// file, and a pycocotools cross-check of mAP50-95 (skipped when pycocotools is not installed).
#include "apps/training/evaluator.h"
#include "apps/training/weights.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "io/data_yaml.h"
#include "tests/apps/e2e_util.h"

namespace {

namespace fs = std::filesystem;
using engine::Tensor;

constexpr int kImg = 128;
constexpr int kBatch = 4;

struct Fixture {
  std::string dir, yaml;
  io::DataConfig data;
};

const Fixture& fixture() {
  static Fixture f = [] {
    Fixture x;
    x.dir = e2e::temp_dir("val");
    x.yaml = e2e::make_dataset(x.dir + "/ds", 10, kImg);
    x.data = io::load_data_yaml(x.yaml);
    return x;
  }();
  return f;
}

// A larger set (no model runs on it) for the pycocotools cross-check: AP differences between the
// two interpolation rules shrink with the number of objects.
const Fixture& large_fixture() {
  static Fixture f = [] {
    Fixture x;
    x.dir = e2e::temp_dir("val_large");
    x.yaml = e2e::make_dataset(x.dir + "/ds", 80, kImg);
    x.data = io::load_data_yaml(x.yaml);
    return x;
  }();
  return f;
}

std::shared_ptr<io::AugmentedDataset> val_dataset(const Fixture& f = fixture(), int batch = kBatch) {
  return training::make_val_dataset(f.data.val, kImg, batch, true, 0.5, f.data.nc, false, 0, "val: ");
}

// Deterministic pseudo-random in [0, 1) from integers.
double hash01(int64_t a, int64_t b, int64_t c) {
  uint64_t x = static_cast<uint64_t>(a) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(b) * 0xC2B2AE3D27D4EB4Full ^
               static_cast<uint64_t>(c + 1) * 0x165667B19E3779F9ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / 9007199254740992.0;
}

// A predictor that returns the batch's ground truth, with false positives (wrong class, shifted)
// and, when `noisy`, box jitter and missed objects: [B, 4 + nc, A] with A = 64 anchors, unused
// anchors scored 0.
training::Predictor noisy_gt_predictor(int64_t nc, bool noisy = true) {
  return [nc, noisy](const Tensor& im, const io::Batch& b) {
    const int64_t B = im.size(0), H = im.size(2), W = im.size(3), A = 64;
    std::vector<float> p(static_cast<size_t>(B * (4 + nc) * A), 0.f);
    std::vector<int64_t> used(static_cast<size_t>(B), 0);
    auto put = [&](int64_t bi, float cx, float cy, float w, float h, int64_t c, float s) {
      int64_t a = used[static_cast<size_t>(bi)]++;
      if (a >= A) return;
      float v[4] = {cx, cy, w, h};
      for (int k = 0; k < 4; ++k) p[static_cast<size_t>((bi * (4 + nc) + k) * A + a)] = v[k];
      p[static_cast<size_t>((bi * (4 + nc) + 4 + c) * A + a)] = s;
    };
    const auto t = b.targets.to_vector<float>();
    for (size_t i = 0; i * 6 < t.size(); ++i) {
      const int64_t bi = static_cast<int64_t>(t[6 * i]), c = static_cast<int64_t>(t[6 * i + 1]);
      const int64_t key = b.indices[static_cast<size_t>(bi)];
      const float cx = t[6 * i + 2] * W, cy = t[6 * i + 3] * H, w = t[6 * i + 4] * W, h = t[6 * i + 5] * H;
      const double u = hash01(key, static_cast<int64_t>(i), 0);
      if (noisy && u < 0.12) continue;  // missed object
      const float amp = noisy ? 0.3f : 0.f;
      const float jx = static_cast<float>((hash01(key, i, 1) - 0.5) * amp) * w;
      const float jy = static_cast<float>((hash01(key, i, 2) - 0.5) * amp) * h;
      const float sw = static_cast<float>(1 + (hash01(key, i, 3) - 0.5) * amp);
      put(bi, cx + jx, cy + jy, w * sw, h, c, static_cast<float>(0.2 + 0.79 * hash01(key, i, 4)));
      if (hash01(key, i, 5) < 0.35)  // false positive: wrong class, shifted
        put(bi, cx + 0.4f * w, cy, w, h, (c + 1) % nc, static_cast<float>(0.05 + 0.9 * hash01(key, i, 6)));
    }
    return Tensor::from_vector(p, {B, 4 + nc, A});
  };
}

size_t count_lines(const std::string& path) {
  std::ifstream f(path);
  std::string l;
  size_t n = 0;
  while (std::getline(f, l)) n += !l.empty();
  return n;
}

TEST(ValE2E, RandomModelLibraryRun) {
  const auto& f = fixture();
  graph::BuildOptions bo;
  bo.seed = 3;
  auto model = graph::Model::from_yaml(e2e::cfg_path("gelan-t"), f.data.nc, bo);
  training::ValOptions o;
  o.batch_size = kBatch;
  o.workers = 1;
  o.names = f.data.names;
  o.save_dir = f.dir + "/run_random";
  o.print = true;
  training::ValResult r = training::run_validation(*model, val_dataset(), o);
  EXPECT_EQ(r.seen, 10);
  EXPECT_GT(r.instances, 0);
  const std::string header =
      "                 Class     Images  Instances          P          R      mAP50   mAP50-95\n";
  EXPECT_EQ(r.table.substr(0, header.size()), header);
  EXPECT_NE(r.table.find("                   all         10"), std::string::npos) << r.table;
  EXPECT_GE(r.metrics.map, 0.0);
  EXPECT_LE(r.metrics.map, r.metrics.map50 + 1e-12);
  EXPECT_GT(r.inf_ms, 0.0);
  for (const char* file : {"confusion_matrix.png", "val_batch0_labels.jpg", "val_batch0_pred.jpg",
                           "val_batch1_labels.jpg", "val_batch2_pred.jpg"})
    EXPECT_TRUE(fs::exists(fs::path(o.save_dir) / file)) << file;
  EXPECT_FALSE(fs::exists(fs::path(o.save_dir) / "val_batch3_pred.jpg"));
  // the confusion matrix counts every label once (column sums = instances per class)
  const auto cm = r.confusion.to_vector<double>();
  double total = 0;
  const int64_t n = f.data.nc + 1;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f.data.nc; ++j) total += cm[static_cast<size_t>(i * n + j)];
  EXPECT_EQ(static_cast<int64_t>(total), r.instances);
}

TEST(ValE2E, NoisyGroundTruthOutputs) {
  const auto& f = fixture();
  training::ValOptions o;
  o.batch_size = kBatch;
  o.workers = 2;
  o.names = f.data.names;
  o.save_dir = f.dir + "/run_gt";
  o.save_json = true;
  o.save_txt = true;
  o.save_conf = true;
  o.json_stem = "gt";
  training::ValResult r = training::run_validation(noisy_gt_predictor(f.data.nc), val_dataset(), o);
  EXPECT_GT(r.metrics.map50, 0.4);
  EXPECT_LT(r.metrics.map50, 0.999);
  EXPECT_GT(r.metrics.map, 0.1);
  EXPECT_LT(r.metrics.map, r.metrics.map50);
  // per-class rows (nc = 3 < 50, stand-alone)
  for (const auto& n : f.data.names) EXPECT_NE(r.table.find(n), std::string::npos) << r.table;
  for (const char* file : {"PR_curve.png", "F1_curve.png", "P_curve.png", "R_curve.png", "confusion_matrix.png"})
    EXPECT_TRUE(fs::exists(fs::path(o.save_dir) / file)) << file;
  // JSON: one entry per kept detection, boxes inside the original images
  std::ifstream jf(r.json_path);
  ASSERT_TRUE(jf.good()) << r.json_path;
  nlohmann::json j = nlohmann::json::parse(jf);
  ASSERT_TRUE(j.is_array());
  ASSERT_GT(j.size(), 10u);
  size_t txt_lines = 0;
  for (const auto& e : fs::directory_iterator(fs::path(o.save_dir) / "labels")) txt_lines += count_lines(e.path().string());
  EXPECT_EQ(txt_lines, j.size());
  for (const auto& d : j) {
    ASSERT_TRUE(d["image_id"].is_number_integer());  // synth stems are numeric
    EXPECT_GE(d["category_id"].get<int>(), 0);
    EXPECT_LT(d["category_id"].get<int>(), f.data.nc);
    const auto b = d["bbox"];
    EXPECT_GE(b[0].get<double>(), 0.0);
    EXPECT_LE(b[0].get<double>() + b[2].get<double>(), kImg + 1e-3);
    const double s = d["score"].get<double>();
    EXPECT_NEAR(s * 1e5, std::round(s * 1e5), 1e-6);
  }
}

TEST(ValE2E, CocoJsonHelpers) {
  EXPECT_EQ(training::coco_image_id("/a/b/000000397133.jpg"), nlohmann::json(397133));
  EXPECT_EQ(training::coco_image_id("/a/b/bus_1.jpg"), nlohmann::json("bus_1"));
  EXPECT_TRUE(training::is_coco_val({"/data/coco/val2017.txt"}));
  EXPECT_FALSE(training::is_coco_val({"/data/coco128/images/train2017"}));
  ASSERT_EQ(training::coco80_to_coco91().size(), 80u);
  EXPECT_EQ(training::coco80_to_coco91()[11], 13);
  EXPECT_EQ(training::coco80_to_coco91()[79], 90);
  Tensor det = Tensor::from_vector(std::vector<float>{10.f, 20.f, 40.5f, 60.25f, 0.8765432f, 11.f}, {1, 6});
  nlohmann::json out = nlohmann::json::array();
  training::append_coco_json(det, "x/000000000042.jpg", true, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["image_id"], 42);
  EXPECT_EQ(out[0]["category_id"], 13);
  EXPECT_DOUBLE_EQ(out[0]["bbox"][2].get<double>(), 30.5);
  EXPECT_DOUBLE_EQ(out[0]["bbox"][3].get<double>(), 40.25);
  EXPECT_DOUBLE_EQ(out[0]["score"].get<double>(), 0.87654);
  EXPECT_EQ(training::yolo_txt_lines(det, 100, 200, true), "11 0.12625 0.40125 0.1525 0.4025 0.876543\n");
}

TEST(ValE2E, CommandLine) {
  const auto& f = fixture();
  const std::string w = f.dir + "/yolov9-t-ema.safetensors";
  e2e::make_checkpoint("yolov9-t", f.data.nc, w, /*ema_prefix=*/true);
  const std::string project = f.dir + "/runs_val";
  auto r = e2e::run_cli("val --data '" + f.yaml + "' --weights '" + w + "' --img 128 --batch 4 --workers 1 --project '" +
                        project + "' --name exp --save-json --save-txt --save-conf --verbose");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("                 Class     Images  Instances          P          R      mAP50   mAP50-95"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n {19}all {9}10 +\d+ )"))) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(Speed: [0-9.]+ms pre-process, [0-9.]+ms inference, [0-9.]+ms NMS per image at shape \(4, 3, 128, 128\))")))
      << r.out;
  EXPECT_NE(r.out.find("EMA"), std::string::npos) << r.out;
  const fs::path run = fs::path(project) / "exp";
  EXPECT_TRUE(fs::exists(run / "confusion_matrix.png"));
  EXPECT_TRUE(fs::exists(run / "val_batch0_labels.jpg"));
  std::ifstream jf(run / "yolov9-t-ema_predictions.json");
  ASSERT_TRUE(jf.good()) << r.out;
  EXPECT_TRUE(nlohmann::json::parse(jf).is_array());
  // a second run increments the folder; --task speed prints its own settings
  auto r2 = e2e::run_cli("val --data '" + f.yaml + "' --weights '" + w + "' --img 128 --batch 4 --workers 1 --project '" +
                         project + "' --task speed");
  ASSERT_EQ(r2.rc, 0) << r2.out;
  EXPECT_TRUE(fs::exists(fs::path(project) / "exp2"));
}

TEST(ValE2E, LoadModelPrefersEma) {
  const auto& f = fixture();
  const std::string w = f.dir + "/gelan-t-ema.safetensors";
  auto ref = e2e::make_checkpoint("gelan-t", f.data.nc, w, /*ema_prefix=*/true);
  training::LoadedModel lm = training::load_model(w);
  EXPECT_TRUE(lm.ema);
  EXPECT_EQ(lm.names, f.data.names);
  EXPECT_FALSE(lm.model->training());
  const auto a = lm.model->state_dict(), b = ref->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.to_vector<double>(), b[i].second.to_vector<double>()) << a[i].first;
  }
  // a class count that does not match the file names the tensor
  try {
    training::load_model(w, e2e::cfg_path("gelan-s"));
    FAIL() << "expected ShapeError";
  } catch (const engine::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

TEST(ValE2E, MissingWeightsNamesThePath) {
  const auto& f = fixture();
  auto r = e2e::run_cli("val --data '" + f.yaml + "' --weights /nonexistent/w.safetensors --project '" + f.dir +
                        "/runs_missing'");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("/nonexistent/w.safetensors"), std::string::npos) << r.out;
  EXPECT_THROW(training::load_model("/nonexistent/w.safetensors"), engine::IoError);
}

// pycocotools scores our --save-json output against a COCO ground truth made from the labels;
// the two AP@[.5:.95] must agree within 0.75 points. Predictions: every object found with its
// exact box plus interleaved false positives, so precision drops below 1 and both sides compute a
// non-trivial AP; COCO's AP must then be the same at IoU 0.5 and at 0.5:0.95 (any error in the
// JSON boxes, ids or classes would lower it at high IoU). Recall reaches 1, where the official AP
// (envelope linearly interpolated, trapezoidal integration, end point (1, 0)) and COCO's (step
// lookup, mean of 101 points) differ least: np.interp at recall 1 returns the appended 0, so the
// official AP loses 0.5 * 0.01 * P(R = 1) per class (0.5 points at P = 1: the familiar 0.995),
// hence 0.75 rather than 0.5 points. With missed objects the official AP instead adds a triangle
// 0.5 (1 - R) P above COCO's (several points on small sets); see shared/spec/eval.md 4.2.
TEST(ValE2E, PycocotoolsCrossCheck) {
  if (std::system("python3 -c 'import pycocotools' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "pycocotools not installed (pip install pycocotools)";
  const auto& f = large_fixture();
  training::ValOptions o;
  o.batch_size = kBatch;
  o.workers = 1;
  o.names = f.data.names;
  o.save_dir = f.dir + "/run_coco";
  o.save_json = true;
  o.plots = false;
  o.print = false;
  o.json_stem = "coco";
  training::ValResult r = training::run_validation(noisy_gt_predictor(f.data.nc, /*noisy=*/false), val_dataset(f), o);
  ASSERT_GT(r.metrics.map, 0.3);
  ASSERT_LT(r.metrics.map, 0.99);
  // ground truth JSON from the label files and the original image sizes
  nlohmann::json gt = {{"images", nlohmann::json::array()}, {"annotations", nlohmann::json::array()},
                       {"categories", nlohmann::json::array()}};
  for (int c = 0; c < f.data.nc; ++c) gt["categories"].push_back({{"id", c}, {"name", f.data.names[c]}});
  int ann = 1;
  for (const auto& img : io::resolve_image_files(f.data.val)) {
    cv::Mat m = cv::imread(img);
    const nlohmann::json id = training::coco_image_id(img);
    gt["images"].push_back({{"id", id}, {"width", m.cols}, {"height", m.rows}});
    std::ifstream lf(io::image_to_label_path(img));
    double c, x, y, w, h;
    while (lf >> c >> x >> y >> w >> h) {
      const double bw = w * m.cols, bh = h * m.rows;
      gt["annotations"].push_back({{"id", ann++},
                                   {"image_id", id},
                                   {"category_id", static_cast<int>(c)},
                                   {"bbox", {(x - w / 2) * m.cols, (y - h / 2) * m.rows, bw, bh}},
                                   {"area", bw * bh},
                                   {"iscrowd", 0}});
    }
  }
  const std::string gt_path = f.dir + "/coco_gt.json";
  std::ofstream(gt_path) << gt.dump();
  const std::string py = f.dir + "/coco_eval.py";
  std::ofstream(py) << "import sys\nfrom pycocotools.coco import COCO\nfrom pycocotools.cocoeval import COCOeval\n"
                       "gt = COCO(sys.argv[1]); dt = gt.loadRes(sys.argv[2])\n"
                       "e = COCOeval(gt, dt, 'bbox'); e.evaluate(); e.accumulate(); e.summarize()\n"
                       "print('RESULT %.6f %.6f' % (e.stats[0], e.stats[1]))\n";
  FILE* p = ::popen(("python3 '" + py + "' '" + gt_path + "' '" + r.json_path + "' 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(RESULT ([0-9.]+) ([0-9.]+))"))) << out;
  const double coco_map = std::stod(m[1]), coco_map50 = std::stod(m[2]);
  std::printf("ours: mAP50 %.4f mAP50-95 %.4f; pycocotools: AP50 %.4f AP %.4f\n", r.metrics.map50, r.metrics.map,
              coco_map50, coco_map);
  EXPECT_NEAR(coco_map, coco_map50, 1e-3) << "JSON boxes are not exact: " << out;
  EXPECT_NEAR(r.metrics.map, coco_map, 0.0075) << out;
  EXPECT_NEAR(r.metrics.map50, coco_map50, 0.0075) << out;
  // the built-in pycocotools step (official --save-json with annotations) replaces map / map50
  o.anno_json = gt_path;
  o.save_dir = f.dir + "/run_coco2";
  training::ValResult r2 = training::run_validation(noisy_gt_predictor(f.data.nc, /*noisy=*/false), val_dataset(f), o);
  ASSERT_TRUE(r2.coco_evaluated);
  EXPECT_NEAR(r2.metrics.map, coco_map, 1e-5);
  EXPECT_NEAR(r2.metrics.map50, coco_map50, 1e-5);
}

// --save-hybrid: ground truth enters NMS as score-1 candidates, so even a predictor with no
// candidates scores (nearly) perfectly, and the txt files hold the labels.
TEST(ValE2E, SaveHybrid) {
  const auto& f = fixture();
  training::ValOptions o;
  o.batch_size = kBatch;
  o.workers = 1;
  o.names = f.data.names;
  o.save_dir = f.dir + "/run_hybrid";
  o.save_hybrid = true;
  o.plots = false;
  o.print = false;
  const int64_t nc = f.data.nc;
  training::Predictor empty = [nc](const Tensor& im, const io::Batch&) {
    return Tensor::zeros({im.size(0), 4 + nc, 8});
  };
  training::ValResult r = training::run_validation(empty, val_dataset(), o);
  EXPECT_GT(r.metrics.map50, 0.99);
  EXPECT_GT(r.metrics.map, 0.95);
  EXPECT_EQ(r.label_files, 10);
}

}  // namespace
