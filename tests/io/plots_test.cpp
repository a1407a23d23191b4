// Unit tests of io/plots and io/plot_canvas: every figure is written, read back with cv::imread,
// and checked for size and non-trivial content; bad inputs raise ShapeError / IoError naming the
// path. Set Y9_PLOTS_OUT=<dir> to keep the images for a visual check.
#include "io/plots.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/error.h"
#include "io/grad_norm_log.h"
#include "io/plot_canvas.h"

namespace {

using engine::Tensor;
namespace fs = std::filesystem;

class PlotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* keep = std::getenv("Y9_PLOTS_OUT");
    if (keep && *keep) {
      dir_ = keep;
      keep_ = true;
    } else {
      dir_ = (fs::temp_directory_path() / ("y9_plots_" + std::to_string(::getpid()))).string();
    }
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!keep_) fs::remove_all(dir_);
  }
  std::string out(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  // A path whose parent is a regular file: never writable.
  std::string bad(const std::string& name) const {
    std::string f = out("not_a_dir");
    std::ofstream(f) << "x";
    return f + "/" + name;
  }
  std::string dir_;
  bool keep_ = false;
};

// Reads back the image and checks its size and that it is not a blank page.
void expect_image(const std::string& path, int w, int h) {
  cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty()) << path;
  if (w > 0) EXPECT_EQ(img.cols, w) << path;
  if (h > 0) EXPECT_EQ(img.rows, h) << path;
  cv::Scalar mean, sd;
  cv::meanStdDev(img, mean, sd);
  EXPECT_GT(sd[0] + sd[1] + sd[2], 10.0) << "image looks uniform: " << path;
  // Some dark pixels (text, frames) on a light page.
  cv::Mat grey;
  cv::cvtColor(img, grey, cv::COLOR_BGR2GRAY);
  EXPECT_GT(cv::countNonZero(grey < 80), 100) << path;
}

// Number of strongly blue pixels (the mean curve is pure blue).
int blue_pixels(const std::string& path) {
  cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
  cv::Mat mask;
  cv::inRange(img, cv::Scalar(200, 0, 0), cv::Scalar(255, 70, 70), mask);
  return cv::countNonZero(mask);
}

template <typename Exc, typename F>
void expect_throw_naming(F&& f, const std::string& what) {
  try {
    f();
  } catch (const Exc& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << "message does not name " << what << ": "
                                                                   << e.what();
    return;
  }
  ADD_FAILURE() << "expected exception naming " << what;
}

// --- results.png ----------------------------------------------------------------------------

void write_results_csv(const std::string& path, int epochs) {
  const char* cols[] = {"epoch",          "train/box_loss", "train/cls_loss",  "train/dfl_loss",
                        "metrics/precision", "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95",
                        "val/box_loss",   "val/cls_loss",   "val/dfl_loss",    "x/lr0",
                        "x/lr1",          "x/lr2"};
  std::ofstream f(path);
  char buf[64];
  for (int c = 0; c < 14; ++c) {
    std::snprintf(buf, sizeof(buf), "%20s", cols[c]);
    f << buf << (c < 13 ? "," : "\n");
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> noise(-0.05, 0.05);
  for (int e = 0; e < epochs; ++e) {
    for (int c = 0; c < 14; ++c) {
      double v = c == 0 ? e
                 : (c >= 4 && c <= 7) ? (1 - std::exp(-e / 8.0)) * (0.5 + 0.1 * c) + noise(rng) * 0.3
                                      : 3.0 / (1 + e * 0.2) + noise(rng) + c * 0.1;
      if (c == 0)
        std::snprintf(buf, sizeof(buf), "%20d", e);
      else
        std::snprintf(buf, sizeof(buf), "%20.5g", v);
      f << buf << (c < 13 ? "," : "\n");
    }
  }
}

TEST_F(PlotsTest, ResultsGrid) {
  std::string csv = out("results.csv");
  write_results_csv(csv, 40);
  io::plot_results(csv, out("results.png"));
  expect_image(out("results.png"), 2000, 900);
  // A single epoch must not break the smoothing or the axes.
  write_results_csv(out("one.csv"), 1);
  io::plot_results(out("one.csv"), out("results_one.png"));
  expect_image(out("results_one.png"), 2000, 900);
}

TEST_F(PlotsTest, ResultsErrorsNameThePath) {
  std::string missing = out("missing.csv");
  expect_throw_naming<engine::IoError>([&] { io::plot_results(missing, out("x.png")); }, missing);
  std::string nocol = out("nocol.csv");
  std::ofstream(nocol) << "   epoch,  train/box_loss\n 0, 1.0\n";
  expect_throw_naming<engine::IoError>([&] { io::plot_results(nocol, out("x.png")); }, nocol);
  std::string csv = out("ok.csv");
  write_results_csv(csv, 3);
  std::string b = bad("r.png");
  expect_throw_naming<engine::IoError>([&] { io::plot_results(csv, b); }, b);
}

// --- confusion matrix -------------------------------------------------------------------------

Tensor random_counts(int n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> d(0, 5);
  std::vector<double> m(static_cast<size_t>(n * n));
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) m[static_cast<size_t>(r * n + c)] = (r == c ? 40 : 0) + d(rng) * (d(rng) > 3);
  return Tensor::from_vector<double>(m, {n, n});
}

TEST_F(PlotsTest, ConfusionMatrix) {
  io::plot_confusion_matrix(random_counts(4, 1), {"rectangle", "ellipse", "triangle"}, true,
                            out("confusion_matrix.png"));
  expect_image(out("confusion_matrix.png"), 1600, 1300);
  // Many classes: no annotations, numeric ticks, still readable.
  io::plot_confusion_matrix(random_counts(81, 2), {}, true, out("confusion_matrix_80.png"));
  expect_image(out("confusion_matrix_80.png"), 1600, 1300);
  io::plot_confusion_matrix(random_counts(3, 3), {"a", "b"}, false, out("confusion_matrix_raw.png"));
  expect_image(out("confusion_matrix_raw.png"), 1600, 1300);
}

TEST_F(PlotsTest, ConfusionMatrixErrors) {
  std::string p = out("cm_bad.png");
  expect_throw_naming<engine::ShapeError>(
      [&] { io::plot_confusion_matrix(Tensor::zeros({3, 4}, engine::DType::F64), {}, true, p); }, p);
  std::string b = bad("cm.png");
  expect_throw_naming<engine::IoError>([&] { io::plot_confusion_matrix(random_counts(3, 1), {}, true, b); }, b);
}

// --- curves ---------------------------------------------------------------------------------

struct CurveData {
  Tensor px, py, ap;
};

CurveData make_curves(int nc, bool pr) {
  std::vector<double> px(1000), py(static_cast<size_t>(nc) * 1000), ap(static_cast<size_t>(nc));
  for (int j = 0; j < 1000; ++j) px[static_cast<size_t>(j)] = j / 999.0;
  for (int c = 0; c < nc; ++c) {
    double k = 1.0 + 3.0 * c / std::max(nc - 1, 1);
    double s = 0;
    for (int j = 0; j < 1000; ++j) {
      double x = px[static_cast<size_t>(j)];
      double v = pr ? 1.0 - std::pow(x, k * 2) : 4 * x * (1 - x) * (1.0 - 0.5 * c / std::max(nc, 1));
      py[static_cast<size_t>(c * 1000 + j)] = v;
      s += v;
    }
    ap[static_cast<size_t>(c)] = s / 1000;
  }
  return {Tensor::from_vector<double>(px, {1000}), Tensor::from_vector<double>(py, {nc, 1000}),
          Tensor::from_vector<double>(ap, {nc})};
}

TEST_F(PlotsTest, PrCurve) {
  CurveData d = make_curves(3, true);
  io::plot_pr_curve(d.px, d.py, d.ap, {"rectangle", "ellipse", "triangle"}, out("PR_curve.png"));
  expect_image(out("PR_curve.png"), 1500, 1000);
  EXPECT_GT(blue_pixels(out("PR_curve.png")), 1000);
  // 25 classes: grey lines, legend with the mean only; ap as [C, K].
  CurveData e = make_curves(25, true);
  io::plot_pr_curve(e.px, e.py, e.ap.unsqueeze(1).expand({25, 10}).contiguous(), {}, out("PR_curve_25.png"));
  expect_image(out("PR_curve_25.png"), 1500, 1000);
}

TEST_F(PlotsTest, McCurves) {
  CurveData d = make_curves(3, false);
  std::vector<std::string> names = {"rectangle", "ellipse", "triangle"};
  io::plot_mc_curve(d.px, d.py, names, "Confidence", "F1", out("F1_curve.png"));
  expect_image(out("F1_curve.png"), 1500, 1000);
  EXPECT_GT(blue_pixels(out("F1_curve.png")), 1000);
  CurveData e = make_curves(25, false);
  io::plot_mc_curve(e.px, e.py, {}, "Confidence", "Precision", out("P_curve.png"));
  expect_image(out("P_curve.png"), 1500, 1000);
}

TEST_F(PlotsTest, CurveErrors) {
  CurveData d = make_curves(3, true);
  std::string p = out("bad_curve.png");
  expect_throw_naming<engine::ShapeError>(
      [&] { io::plot_pr_curve(d.px.slice(0, 0, 500), d.py, d.ap, {}, p); }, p);
  expect_throw_naming<engine::ShapeError>([&] { io::plot_pr_curve(d.px, d.py, d.ap.slice(0, 0, 2), {}, p); }, p);
  expect_throw_naming<engine::ShapeError>([&] { io::plot_mc_curve(d.px, d.py, {"a", "b"}, "Confidence", "F1", p); },
                                          p);
  std::string b = bad("pr.png");
  expect_throw_naming<engine::IoError>([&] { io::plot_pr_curve(d.px, d.py, d.ap, {}, b); }, b);
}

TEST(PlotFilters, SmoothBoxMatchesOfficialWidth) {
  // len 1000, f 0.05: nf = round(100) // 2 + 1 = 51, so a unit step at index 500 ramps over 51 points.
  std::vector<double> y(1000, 0.0);
  for (size_t i = 500; i < y.size(); ++i) y[i] = 1.0;
  auto s = io::smooth_box(y);
  ASSERT_EQ(s.size(), y.size());
  EXPECT_DOUBLE_EQ(s[474], 0.0);
  EXPECT_NEAR(s[475], 1.0 / 51, 1e-12);
  EXPECT_NEAR(s[500], 26.0 / 51, 1e-12);
  EXPECT_DOUBLE_EQ(s[525], 1.0);
  // End padding with the edge values keeps a constant constant.
  auto c = io::smooth_box(std::vector<double>(37, 2.5));
  for (double v : c) EXPECT_NEAR(v, 2.5, 1e-12);
}

TEST(PlotFilters, GaussianFilterReflect) {
  // Interior delta: the output is the normalised kernel (radius int(4 sigma + 0.5) = 12).
  std::vector<double> y(41, 0.0);
  y[20] = 1.0;
  auto g = io::gaussian_filter1d(y, 3.0);
  double z = 0;
  for (int k = -12; k <= 12; ++k) z += std::exp(-k * k / 18.0);
  EXPECT_NEAR(g[20], 1.0 / z, 1e-12);
  EXPECT_NEAR(g[23], std::exp(-0.5) / z, 1e-12);
  EXPECT_NEAR(g[7], 0.0, 1e-15);  // beyond the radius
  double sum = 0;
  for (double v : g) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  // Reflect mode keeps a linear ramp's mean at the edges of short inputs and handles n=1.
  auto one = io::gaussian_filter1d({4.0}, 3.0);
  EXPECT_NEAR(one[0], 4.0, 1e-12);
  // Boundary: reflect (a b c | c b a): for y = [1, 0, 0, ...] the first output gets weights of k=0 and k=-1.
  std::vector<double> e(30, 0.0);
  e[0] = 1.0;
  auto ge = io::gaussian_filter1d(e, 3.0);
  EXPECT_NEAR(ge[0], (1.0 + std::exp(-1.0 / 18.0)) / z, 1e-12);
}

// --- labels.jpg -----------------------------------------------------------------------------

TEST_F(PlotsTest, Labels) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  const int n = 600;
  std::vector<double> cls(n), b(n * 4);
  for (int i = 0; i < n; ++i) {
    cls[static_cast<size_t>(i)] = std::floor(u(rng) * u(rng) * 3);
    double w = 0.05 + 0.3 * u(rng), h = 0.05 + 0.3 * u(rng);
    b[static_cast<size_t>(i * 4 + 0)] = w / 2 + (1 - w) * u(rng);
    b[static_cast<size_t>(i * 4 + 1)] = h / 2 + (1 - h) * u(rng);
    b[static_cast<size_t>(i * 4 + 2)] = w;
    b[static_cast<size_t>(i * 4 + 3)] = h;
  }
  Tensor tc = Tensor::from_vector<double>(cls, {n}), tb = Tensor::from_vector<double>(b, {n, 4});
  io::plot_labels(tc, tb, {"rectangle", "ellipse", "triangle"}, out("labels.jpg"));
  expect_image(out("labels.jpg"), 1600, 1600);
  io::plot_labels(tc.to(engine::DType::F32), tb.to(engine::DType::F32), {}, out("labels_nonames.jpg"));
  expect_image(out("labels_nonames.jpg"), 1600, 1600);
  // Empty label set still draws the axes.
  io::plot_labels(Tensor::zeros({0}), Tensor::zeros({0, 4}), {}, out("labels_empty.jpg"));
  expect_image(out("labels_empty.jpg"), 1600, 1600);

  std::string p = out("labels_bad.jpg");
  expect_throw_naming<engine::ShapeError>([&] { io::plot_labels(tc.slice(0, 0, 10), tb, {}, p); }, p);
  expect_throw_naming<engine::ShapeError>([&] { io::plot_labels(tc, tb.slice(1, 0, 3), {}, p); }, p);
  std::string bp = bad("labels.jpg");
  expect_throw_naming<engine::IoError>([&] { io::plot_labels(tc, tb, {}, bp); }, bp);
}

// --- batch mosaics ----------------------------------------------------------------------------

Tensor gradient_images(int b, int h, int w) {
  std::vector<uint8_t> px(static_cast<size_t>(b) * 3 * h * w);
  for (int i = 0; i < b; ++i)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          px[((static_cast<size_t>(i) * 3 + c) * h + y) * w + x] =
              static_cast<uint8_t>((c == 0 ? x * 255 / w : c == 1 ? y * 255 / h : 40 * i) % 256);
  return Tensor::from_vector<uint8_t>(px, {b, 3, h, w});
}

TEST_F(PlotsTest, BatchMosaic) {
  Tensor imgs = gradient_images(5, 96, 128);
  // Normalised targets: (img, cls, cx, cy, w, h).
  Tensor t = Tensor::from_vector<double>({0, 0, 0.5, 0.5, 0.4, 0.5,  //
                                          1, 1, 0.3, 0.4, 0.2, 0.3,  //
                                          4, 2, 0.7, 0.6, 0.3, 0.3},
                                         {3, 6});
  io::plot_images(imgs, t, {"rectangle", "ellipse", "triangle"}, out("train_batch0.jpg"), Tensor(),
                  {"a/im0.jpg", "a/im1.jpg"});
  // ns = ceil(sqrt(5)) = 3 tiles per side, no downscale.
  expect_image(out("train_batch0.jpg"), 3 * 128, 3 * 96);
  // Predictions with confidences in pixels; 16 of 20 images, downscaled to max_size.
  Tensor many = gradient_images(20, 320, 320).to(engine::DType::F32);
  many.mul_(1.0 / 255.0);
  Tensor pred = Tensor::from_vector<double>({0, 0, 160, 160, 100, 80, 0.9,  //
                                             3, 1, 60, 60, 50, 50, 0.1,     //
                                             15, 2, 200, 100, 80, 120, 0.6},
                                            {3, 7});
  io::plot_images(many, Tensor(), {"rectangle", "ellipse", "triangle"}, out("val_batch0_pred.jpg"), pred, {}, 640);
  expect_image(out("val_batch0_pred.jpg"), 640, 640);

  std::string p = out("bad_batch.jpg");
  expect_throw_naming<engine::ShapeError>([&] { io::plot_images(imgs.slice(1, 0, 1), t, {}, p); }, p);
  expect_throw_naming<engine::ShapeError>([&] { io::plot_images(imgs, t.slice(1, 0, 5), {}, p); }, p);
  std::string bp = bad("batch.jpg");
  expect_throw_naming<engine::IoError>([&] { io::plot_images(imgs, t, {}, bp); }, bp);
}

TEST(PlotCanvas, NiceTicks) {
  auto t = io::plot::nice_ticks(0, 1, 6);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_NEAR(t[1], 0.2, 1e-12);
  EXPECT_EQ(io::plot::format_tick(t[3], 0.2), "0.6");
  auto u = io::plot::nice_ticks(-0.13, 2.71, 5);
  for (double v : u) {
    EXPECT_GE(v, -0.13);
    EXPECT_LE(v, 2.71);
  }
  EXPECT_GE(u.size(), 3u);
  EXPECT_EQ(io::plot::format_tick(-0.0, 0.5), "0.0");
  EXPECT_EQ(io::plot::format_tick(50, 25), "50");
}

}  // namespace

// --- grad_norm.csv / grad_norm.png (issue 16 item 19) --------------------------------------------

namespace {
// nb steps per epoch for `epochs` epochs: norms fall from 300 to ~3, with a spike in epoch 1.
std::vector<io::GradNormRow> synthetic_norms(int epochs, int nb) {
  std::vector<io::GradNormRow> rows;
  for (int e = 0; e < epochs; ++e)
    for (int i = 0; i < nb; ++i) {
      io::GradNormRow r;
      r.epoch = e;
      r.iteration = static_cast<int64_t>(e) * nb + i;
      r.x = e + (i + 1.0) / nb;
      r.norm = 300.0 * std::exp(-0.08 * static_cast<double>(r.iteration)) + 3.0 + (e == 1 && i == 5 ? 5000.0 : 0.0);
      rows.push_back(r);
    }
  return rows;
}
}  // namespace

TEST_F(PlotsTest, GradNormLogRoundTripAndTruncate) {
  const std::string csv = out("grad_norm.csv");
  const auto rows = synthetic_norms(3, 7);
  for (const auto& r : rows) io::append_grad_norm(csv, r);
  io::GradNormRow inf_row{3, 21, 3.0 + 1.0 / 7, INFINITY};
  io::append_grad_norm(csv, inf_row);
  auto back = io::read_grad_norms(csv);
  ASSERT_EQ(back.size(), rows.size() + 1);
  for (size_t k = 0; k < rows.size(); ++k) {
    EXPECT_EQ(back[k].epoch, rows[k].epoch);
    EXPECT_EQ(back[k].iteration, rows[k].iteration);
    EXPECT_EQ(static_cast<float>(back[k].norm), static_cast<float>(rows[k].norm)) << "FP32 norms round-trip";
    EXPECT_NEAR(back[k].x, rows[k].x, 1e-8);
  }
  EXPECT_TRUE(std::isinf(back.back().norm));
  // Resume at iteration 10: rows 10.. are re-run, so they go.
  const auto kept = io::truncate_grad_norms(csv, 10);
  ASSERT_EQ(kept.size(), 10u);
  EXPECT_EQ(io::read_grad_norms(csv).size(), 10u);
  EXPECT_EQ(io::read_grad_norms(csv).back().iteration, 9);
  io::append_grad_norm(csv, rows[10]);  // appending goes on after the truncation
  EXPECT_EQ(io::read_grad_norms(csv).size(), 11u);
  EXPECT_TRUE(io::read_grad_norms(out("no_such.csv")).empty());
  EXPECT_TRUE(io::truncate_grad_norms(out("no_such.csv"), 0).empty());
  EXPECT_FALSE(fs::exists(out("no_such.csv")));
  // Malformed content names the file and line.
  const std::string broken = out("broken.csv");
  std::ofstream(broken) << "epoch,iteration,x,grad_norm\n0,0,0.5,1.25\n0,1,oops\n";
  expect_throw_naming<engine::IoError>([&] { io::read_grad_norms(broken); }, broken + ": line 3");
  const std::string other = out("other.csv");
  std::ofstream(other) << "a,b\n";
  expect_throw_naming<engine::IoError>([&] { io::read_grad_norms(other); }, other);
  expect_throw_naming<engine::IoError>([&] { io::append_grad_norm(bad("g.csv"), rows[0]); }, bad("g.csv"));
}

TEST_F(PlotsTest, GradNormPlot) {
  const std::string csv = out("grad_norm.csv");
  for (const auto& r : synthetic_norms(4, 30)) io::append_grad_norm(csv, r);
  io::plot_grad_norm(csv, out("grad_norm.png"), 10.0);
  expect_image(out("grad_norm.png"), 1600, 700);
  cv::Mat img = cv::imread(out("grad_norm.png"));
  cv::Mat red, orange;
  cv::inRange(img, cv::Scalar(20, 20, 190), cv::Scalar(60, 60, 230), red);        // clip line 0xD62728
  cv::inRange(img, cv::Scalar(0, 110, 235), cv::Scalar(40, 150, 255), orange);    // epoch means (tab orange)
  EXPECT_GT(cv::countNonZero(red), 300) << "the clip threshold line is drawn";
  EXPECT_GT(cv::countNonZero(orange), 300) << "the epoch-mean steps are drawn";
  // No file or no rows: a frame saying so, not an error.
  io::plot_grad_norm(out("none.csv"), out("grad_norm_empty.png"), 10.0);
  EXPECT_FALSE(cv::imread(out("grad_norm_empty.png")).empty());
  expect_throw_naming<engine::IoError>([&] { io::plot_grad_norm(csv, bad("g.png"), 10.0); }, bad("g.png"));
}

TEST_F(PlotsTest, ResultsWithTrailingGradNormColumn) {
  // results.csv gains a trailing grad_norm column; the official panels are found by name.
  const std::string csv = out("results.csv");
  write_results_csv(csv, 5);
  std::ifstream in(csv);
  std::stringstream ss;
  std::string line;
  for (int k = 0; std::getline(in, line); ++k) ss << line << (k == 0 ? ",           grad_norm" : ",     12.5") << "\n";
  in.close();
  std::ofstream(csv) << ss.str();
  io::plot_results(csv, out("results_gn.png"));
  expect_image(out("results_gn.png"), 2000, 900);
}

// --- feature maps (issue 16 item 20) -------------------------------------------------------------

TEST_F(PlotsTest, FeatureMapGrid) {
  // 40 channels of 10 x 12: the first 32 in 4 rows of 8; tiles scaled x6 to 60 x 72, 6 px gaps.
  Tensor x = Tensor::empty({2, 40, 10, 12}, engine::DType::F32);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  io::plot_feature_maps(x, out("stage0_Conv_features.png"));
  cv::Mat img = cv::imread(out("stage0_Conv_features.png"));
  ASSERT_FALSE(img.empty());
  EXPECT_EQ(img.cols, 8 * 72 + 9 * 6);
  EXPECT_EQ(img.rows, 4 * 60 + 5 * 6);
  // viridis: each tile spans dark purple (min) to yellow (max).
  cv::Mat tile = img(cv::Rect(6, 6, 72, 60));
  double lo, hi;
  cv::Mat grey;
  cv::cvtColor(tile, grey, cv::COLOR_BGR2GRAY);
  cv::minMaxLoc(grey, &lo, &hi);
  EXPECT_LT(lo, 60);
  EXPECT_GT(hi, 200);
  // Fewer channels than n: one row of 5; big maps scaled down to 256 px.
  io::plot_feature_maps(Tensor::ones({1, 5, 3, 3}), out("small.png"));
  cv::Mat s = cv::imread(out("small.png"));
  EXPECT_EQ(s.cols, 5 * 66 + 6 * 6);
  io::plot_feature_maps(Tensor::zeros({1, 2, 512, 300}), out("big.png"), 32);
  EXPECT_EQ(cv::imread(out("big.png")).rows, 256 + 2 * 6);
  expect_throw_naming<engine::ShapeError>([&] { io::plot_feature_maps(Tensor::zeros({3, 4, 4}), out("x.png")); },
                                          out("x.png"));
  expect_throw_naming<engine::IoError>([&] { io::plot_feature_maps(x, bad("f.png")); }, bad("f.png"));
}
