// Unit tests of io/synth: file counts and YOLO label format, data.yaml, determinism per seed,
// and that each label box is tight around the drawn shape (every visible pixel of the object is
// inside its box, the box edges are touched by the shape, the written JPEG shows the object colour).
#include "io/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/error.h"

namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  return (fs::temp_directory_path() / ("y9_synth_" + std::to_string(::getpid()) + "_" + name)).string();
}

size_t count_ext(const fs::path& d, const std::string& ext) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(d)) n += e.path().extension() == ext;
  return n;
}

TEST(Synth, WritesYoloLayout) {
  const std::string dir = temp_dir("layout");
  io::SynthOptions opt;
  opt.out_dir = dir;
  opt.n_train = 12;
  opt.n_val = 5;
  opt.img_size = 96;
  opt.seed = 3;
  opt.classes = 4;
  io::SynthSummary s = io::write_synth_dataset(opt);
  EXPECT_EQ(s.train_images, 12);
  EXPECT_EQ(s.val_images, 5);
  EXPECT_GE(s.objects, 17);
  EXPECT_EQ(count_ext(fs::path(dir) / "images/train", ".jpg"), 12u);
  EXPECT_EQ(count_ext(fs::path(dir) / "labels/train", ".txt"), 12u);
  EXPECT_EQ(count_ext(fs::path(dir) / "images/val", ".jpg"), 5u);
  EXPECT_EQ(count_ext(fs::path(dir) / "labels/val", ".txt"), 5u);

  YAML::Node y = YAML::LoadFile(dir + "/data.yaml");
  EXPECT_EQ(y["path"].as<std::string>(), ".");
  EXPECT_EQ(y["train"].as<std::string>(), "images/train");
  EXPECT_EQ(y["val"].as<std::string>(), "images/val");
  EXPECT_EQ(y["nc"].as<int>(), 4);
  ASSERT_EQ(y["names"].size(), 4u);
  EXPECT_EQ(y["names"][3].as<std::string>(), "cross");

  int64_t lines = 0;
  for (const char* split : {"train", "val"})
    for (const auto& e : fs::directory_iterator(fs::path(dir) / "labels" / split)) {
      cv::Mat img = cv::imread((fs::path(dir) / "images" / split / (e.path().stem().string() + ".jpg")).string());
      ASSERT_EQ(img.cols, 96);
      ASSERT_EQ(img.rows, 96);
      std::ifstream f(e.path());
      std::string line;
      int n = 0;
      while (std::getline(f, line)) {
        std::istringstream ss(line);
        int cls = -1;
        double v[4];
        ASSERT_TRUE(ss >> cls >> v[0] >> v[1] >> v[2] >> v[3]) << e.path() << ": " << line;
        std::string rest;
        EXPECT_FALSE(ss >> rest) << "extra fields: " << line;
        EXPECT_GE(cls, 0);
        EXPECT_LT(cls, 4);
        for (double x : v) {
          EXPECT_GT(x, 0.0) << line;
          EXPECT_LE(x, 1.0) << line;
        }
        EXPECT_GE(v[0] - v[2] / 2, -1e-6) << line;
        EXPECT_LE(v[0] + v[2] / 2, 1 + 1e-6) << line;
        EXPECT_GE(v[1] - v[3] / 2, -1e-6) << line;
        EXPECT_LE(v[1] + v[3] / 2, 1 + 1e-6) << line;
        ++n;
      }
      EXPECT_GE(n, 1);
      EXPECT_LE(n, 6);
      lines += n;
    }
  EXPECT_EQ(lines, s.objects);

  // A smaller second run removes the stale files of the first.
  opt.n_train = 4;
  io::write_synth_dataset(opt);
  EXPECT_EQ(count_ext(fs::path(dir) / "images/train", ".jpg"), 4u);
  EXPECT_EQ(count_ext(fs::path(dir) / "labels/train", ".txt"), 4u);
  fs::remove_all(dir);
}

TEST(Synth, DeterministicPerSeed) {
  auto a = io::synth_image(128, 3, 7, 0, 5), b = io::synth_image(128, 3, 7, 0, 5);
  EXPECT_EQ(cv::norm(a.bgr, b.bgr, cv::NORM_INF), 0.0);
  ASSERT_EQ(a.objects.size(), b.objects.size());
  for (size_t i = 0; i < a.objects.size(); ++i) EXPECT_EQ(a.objects[i].cx, b.objects[i].cx);
  auto c = io::synth_image(128, 3, 8, 0, 5), d = io::synth_image(128, 3, 7, 1, 5);
  EXPECT_GT(cv::norm(a.bgr, c.bgr, cv::NORM_L1), 0.0);
  EXPECT_GT(cv::norm(a.bgr, d.bgr, cv::NORM_L1), 0.0);
}

TEST(Synth, BoxesAreTightAroundTheDrawnShapes) {
  const int S = 160;
  int checked = 0, classes_seen = 0, interior_total = 0;
  std::vector<int> per_class(4, 0);
  for (int idx = 0; idx < 40; ++idx) {
    io::SynthImage im = io::synth_image(S, 4, 11, 0, idx);
    ASSERT_GE(im.objects.size(), 1u);
    ASSERT_LE(im.objects.size(), 6u);
    // Round trip through the JPEG written to disk.
    std::vector<uchar> buf;
    cv::imencode(".jpg", im.bgr, buf, {cv::IMWRITE_JPEG_QUALITY, 95});
    cv::Mat jpg = cv::imdecode(buf, cv::IMREAD_COLOR);
    for (size_t o = 0; o < im.objects.size(); ++o) {
      const auto& ob = im.objects[o];
      per_class[static_cast<size_t>(ob.cls)]++;
      double x0 = (ob.cx - ob.w / 2) * S, x1 = (ob.cx + ob.w / 2) * S;
      double y0 = (ob.cy - ob.h / 2) * S, y1 = (ob.cy + ob.h / 2) * S;
      int inside = 0, outside = 0, near_colour = 0, interior = 0;
      // Interior pixels (2 px from any other owner): JPEG chroma subsampling blurs the edges.
      cv::Mat own = im.owner == static_cast<int>(o) + 1, core;
      cv::erode(own, core, cv::Mat::ones(5, 5, CV_8U), cv::Point(-1, -1), 1, cv::BORDER_CONSTANT, cv::Scalar(0));
      int minx = S, maxx = -1, miny = S, maxy = -1;
      for (int y = 0; y < S; ++y)
        for (int x = 0; x < S; ++x) {
          if (im.owner.at<int32_t>(y, x) != static_cast<int>(o) + 1) continue;
          bool in = x + 0.5 > x0 && x + 0.5 < x1 && y + 0.5 > y0 && y + 0.5 < y1;
          (in ? inside : outside)++;
          minx = std::min(minx, x);
          maxx = std::max(maxx, x);
          miny = std::min(miny, y);
          maxy = std::max(maxy, y);
          if (!core.at<uint8_t>(y, x)) continue;
          ++interior;
          cv::Vec3b p = jpg.at<cv::Vec3b>(y, x);
          double diff = 0;
          for (int k = 0; k < 3; ++k) diff += std::abs(p[k] - ob.color[k]);
          near_colour += diff < 60;
        }
      ASSERT_GT(inside, 0) << "object " << o << " of image " << idx << " is invisible";
      EXPECT_EQ(outside, 0) << "visible pixels outside the box, image " << idx;
      // The interior carries the object colour in the JPEG.
      EXPECT_GE(near_colour, 0.9 * interior) << "image " << idx << " object " << o;
      interior_total += interior;
      // Tight: the box is the shape's extent; the visible part spans a good share of it.
      EXPECT_GE((maxx - minx + 1) * (maxy - miny + 1), 0.15 * (x1 - x0) * (y1 - y0)) << "image " << idx;
      ++checked;
    }
  }
  for (int c : per_class) classes_seen += c > 0;
  EXPECT_EQ(classes_seen, 4);
  EXPECT_GT(checked, 60);
  EXPECT_GT(interior_total, 20000);
}

TEST(Synth, UnoccludedBoxEqualsPixelExtent) {
  // The first object of each image is drawn first; where nothing covers it, its visible extent
  // is the box exactly.
  const int S = 128;
  int exact = 0;
  for (int idx = 0; idx < 20; ++idx) {
    io::SynthImage im = io::synth_image(S, 3, 2, 1, idx);
    if (im.objects.size() != 1) continue;
    cv::Mat m = im.owner == 1;
    cv::Rect r = cv::boundingRect(m);
    const auto& ob = im.objects[0];
    EXPECT_NEAR(ob.cx * S, r.x + r.width / 2.0, 1e-3);
    EXPECT_NEAR(ob.cy * S, r.y + r.height / 2.0, 1e-3);
    EXPECT_NEAR(ob.w * S, r.width, 1e-3);
    EXPECT_NEAR(ob.h * S, r.height, 1e-3);
    ++exact;
  }
  EXPECT_GT(exact, 0);
}

TEST(Synth, BadOptions) {
  EXPECT_THROW(io::synth_image(16, 3, 0, 0, 0), engine::ConfigError);
  EXPECT_THROW(io::synth_image(64, 5, 0, 0, 0), engine::ConfigError);
  io::SynthOptions opt;
  opt.out_dir = temp_dir("bad");
  opt.n_train = -1;
  EXPECT_THROW(io::write_synth_dataset(opt), engine::ConfigError);
  // Output below a regular file: IoError naming the path.
  std::string f = temp_dir("file");
  std::ofstream(f) << "x";
  opt.out_dir = f + "/ds";
  opt.n_train = 1;
  try {
    io::write_synth_dataset(opt);
    ADD_FAILURE() << "no IoError";
  } catch (const engine::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
  fs::remove(f);
}

}  // namespace

TEST(Synth, RefusesAFolderItDidNotMake) {
  fs::path dir = fs::temp_directory_path() / ("y9_synth_user_" + std::to_string(::getpid()));
  fs::create_directories(dir / "images" / "train");
  { std::ofstream(dir / "images" / "train" / "mine.jpg") << "user data"; }
  io::SynthOptions o;
  o.out_dir = dir.string();
  o.n_train = 2;
  o.n_val = 1;
  o.img_size = 64;
  try {
    io::write_synth_dataset(o);
    FAIL() << "expected IoError";
  } catch (const engine::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("refusing"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir / "images" / "train" / "mine.jpg"));  // nothing deleted
  // A folder synth made itself may be rewritten.
  fs::path own = dir / "own";
  o.out_dir = own.string();
  io::write_synth_dataset(o);
  EXPECT_NO_THROW(io::write_synth_dataset(o));
  fs::remove_all(dir);
}
