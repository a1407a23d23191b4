// Synthetic shapes dataset: textured backgrounds with filled rectangles, ellipses, triangles and
// crosses, tight YOLO labels, and the data.yaml of the YOLO layout. Each image is drawn from its
// own Philox stream (seed, split, index), so any subset can be regenerated bit for bit.
#include "io/synth.h"

#ifndef Y9_NO_OPENCV_CODECS
#include <opencv2/imgcodecs.hpp>
#endif
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine/error.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "io/image.h"

namespace io {

namespace fs = std::filesystem;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kMinVisible = 0.4;  // fraction of an object's own pixels that must stay visible

// Scalar draws on top of the tensor generator (one Philox block per draw).
class Rand {
 public:
  Rand(uint64_t seed, uint64_t stream) : gen_(seed, stream) {}
  double u(double lo = 0, double hi = 1) { return lo + (hi - lo) * gen_.next_uniform(); }
  int i(int lo, int hi) {  // inclusive
    return std::min(hi, lo + static_cast<int>(gen_.next_uniform() * (hi - lo + 1)));
  }
  engine::Generator& gen() { return gen_; }

 private:
  engine::Generator gen_;
};

cv::Scalar hsv_to_bgr(double h, double s, double v) {
  cv::Mat px(1, 1, CV_8UC3, cv::Scalar(h, s, v)), out;
  cv::cvtColor(px, out, cv::COLOR_HSV2BGR);
  cv::Vec3b c = out.at<cv::Vec3b>(0, 0);
  return cv::Scalar(c[0], c[1], c[2]);
}

std::vector<cv::Point> rotated(const std::vector<cv::Point2d>& local, cv::Point2d c, double angle_rad) {
  double ca = std::cos(angle_rad), sa = std::sin(angle_rad);
  std::vector<cv::Point> out;
  for (const auto& p : local)
    out.emplace_back(static_cast<int>(std::lround(c.x + p.x * ca - p.y * sa)),
                     static_cast<int>(std::lround(c.y + p.x * sa + p.y * ca)));
  return out;
}

// Fills the mask of one shape of class `cls`; returns false if any part would leave the image.
bool shape_mask(cv::Mat& mask, int cls, cv::Point2d c, double w, double h, double angle_rad, double skew) {
  const int S = mask.cols;
  std::vector<std::vector<cv::Point>> polys;
  switch (cls) {
    case 0:  // rectangle
      polys.push_back(rotated({{-w / 2, -h / 2}, {w / 2, -h / 2}, {w / 2, h / 2}, {-w / 2, h / 2}}, c, angle_rad));
      break;
    case 1: {  // ellipse: polygonised finely so the mask and its bounds agree exactly
      std::vector<cv::Point2d> pts;
      for (int k = 0; k < 72; ++k) {
        double t = 2 * kPi * k / 72;
        pts.emplace_back(w / 2 * std::cos(t), h / 2 * std::sin(t));
      }
      polys.push_back(rotated(pts, c, angle_rad));
      break;
    }
    case 2:  // triangle with its apex at a random point of the top edge
      polys.push_back(rotated({{-w / 2, h / 2}, {w / 2, h / 2}, {(skew - 0.5) * w, -h / 2}}, c, angle_rad));
      break;
    default: {  // cross: two bars 30% thick
      double tw = 0.3 * w, th = 0.3 * h;
      polys.push_back(rotated({{-w / 2, -th / 2}, {w / 2, -th / 2}, {w / 2, th / 2}, {-w / 2, th / 2}}, c, angle_rad));
      polys.push_back(rotated({{-tw / 2, -h / 2}, {tw / 2, -h / 2}, {tw / 2, h / 2}, {-tw / 2, h / 2}}, c, angle_rad));
      break;
    }
  }
  for (const auto& poly : polys)
    for (const auto& p : poly)
      if (p.x < 1 || p.y < 1 || p.x > S - 2 || p.y > S - 2) return false;
  mask.setTo(0);
  for (const auto& poly : polys) cv::fillConvexPoly(mask, poly, cv::Scalar(255), cv::LINE_8);
  return true;
}

void check_options(int img_size, int classes) {
  Y9_CHECK_T(engine::ConfigError, img_size >= 32, "synth: --img must be >= 32, got ", img_size);
  Y9_CHECK_T(engine::ConfigError, classes >= 1 && classes <= 4, "synth: --classes must be 1..4, got ", classes);
}

}  // namespace

std::vector<std::string> synth_class_names(int classes) {
  Y9_CHECK_T(engine::ConfigError, classes >= 1 && classes <= 4, "synth: --classes must be 1..4, got ", classes);
  std::vector<std::string> all = {"rectangle", "ellipse", "triangle", "cross"};
  return {all.begin(), all.begin() + classes};
}

// --- One image --------------------------------------------------------------------------------

SynthImage synth_image(int img_size, int classes, uint64_t seed, int split, int64_t index) {
  check_options(img_size, classes);
  const int S = img_size;
  Rand rnd(seed, (static_cast<uint64_t>(split) << 40) | static_cast<uint64_t>(index));

  // Background: gradient between two muted colours, per-pixel noise, random lines.
  cv::Scalar c0 = hsv_to_bgr(rnd.u(0, 180), rnd.u(0, 90), rnd.u(60, 230));
  cv::Scalar c1 = hsv_to_bgr(rnd.u(0, 180), rnd.u(0, 90), rnd.u(60, 230));
  double theta = rnd.u(0, 2 * kPi), amp = rnd.u(4, 24);
  engine::Tensor noise = engine::Tensor::empty({static_cast<int64_t>(S) * S * 3}, engine::DType::F32);
  engine::uniform_(noise, rnd.gen(), -1.0, 1.0);
  const float* nz = noise.data<float>();
  cv::Mat img(S, S, CV_8UC3);
  const double ct = std::cos(theta), st = std::sin(theta);
  for (int y = 0; y < S; ++y) {
    cv::Vec3b* row = img.ptr<cv::Vec3b>(y);
    for (int x = 0; x < S; ++x) {
      double t = std::clamp(((x - S / 2.0) * ct + (y - S / 2.0) * st) / S + 0.5, 0.0, 1.0);
      for (int k = 0; k < 3; ++k)
        row[x][k] = cv::saturate_cast<uint8_t>(c0[k] * (1 - t) + c1[k] * t + amp * nz[(static_cast<size_t>(y) * S + x) * 3 + k]);
    }
  }
  int n_lines = rnd.i(3, 10);
  for (int l = 0; l < n_lines; ++l) {
    cv::Point a(rnd.i(0, S - 1), rnd.i(0, S - 1)), b(rnd.i(0, S - 1), rnd.i(0, S - 1));
    cv::Scalar col = hsv_to_bgr(rnd.u(0, 180), rnd.u(0, 120), rnd.u(40, 255));
    cv::line(img, a, b, col, rnd.i(1, 3), cv::LINE_AA);
  }

  // Objects, painted in order; later ones may cover earlier ones (bounded occlusion).
  SynthImage out;
  out.owner = cv::Mat::zeros(S, S, CV_32S);
  std::vector<int64_t> area, visible;
  cv::Mat mask(S, S, CV_8U);
  const int n_obj = rnd.i(1, 6);
  for (int o = 0; o < n_obj; ++o) {
    for (int attempt = 0; attempt < 30; ++attempt) {
      int cls = rnd.i(0, classes - 1);
      double size = rnd.u(0.08, 0.4) * S, ar = std::exp(rnd.u(std::log(0.5), std::log(2.0)));
      double w = size * std::sqrt(ar), h = size / std::sqrt(ar);
      double angle = cls == 1 || cls == 0 ? rnd.u(0, kPi) : rnd.u(-kPi / 6, kPi / 6);
      double skew = rnd.u(0.2, 0.8);
      cv::Point2d c(rnd.u(0.1, 0.9) * S, rnd.u(0.1, 0.9) * S);
      if (!shape_mask(mask, cls, c, w, h, angle, skew)) continue;
      int64_t n_new = cv::countNonZero(mask);
      if (n_new < 40) continue;
      // Pixels each earlier object would lose.
      std::vector<int64_t> lost(out.objects.size(), 0);
      for (int y = 0; y < S; ++y) {
        const uint8_t* m = mask.ptr<uint8_t>(y);
        const int32_t* ow = out.owner.ptr<int32_t>(y);
        for (int x = 0; x < S; ++x)
          if (m[x] && ow[x] > 0) lost[static_cast<size_t>(ow[x] - 1)]++;
      }
      bool ok = true;
      for (size_t j = 0; j < lost.size(); ++j)
        if (visible[j] - lost[j] < kMinVisible * area[j]) ok = false;
      if (!ok) continue;
      for (size_t j = 0; j < lost.size(); ++j) visible[j] -= lost[j];
      area.push_back(n_new);
      visible.push_back(n_new);
      SynthObject obj;
      obj.cls = cls;
      obj.color = hsv_to_bgr(rnd.u(0, 180), rnd.u(150, 255), rnd.u(120, 255));
      const int id = static_cast<int>(out.objects.size()) + 1;
      for (int y = 0; y < S; ++y) {
        const uint8_t* m = mask.ptr<uint8_t>(y);
        int32_t* ow = out.owner.ptr<int32_t>(y);
        cv::Vec3b* row = img.ptr<cv::Vec3b>(y);
        for (int x = 0; x < S; ++x) {
          if (!m[x]) continue;
          ow[x] = id;
          // Light texture (4 grey levels of the background noise) so objects are not flat.
          for (int k = 0; k < 3; ++k)
            row[x][k] = cv::saturate_cast<uint8_t>(obj.color[k] + 4.0 * nz[(static_cast<size_t>(y) * S + x) * 3 + k]);
        }
      }
      // Tight box of the whole shape (also its occluded part), pixel edges, normalised.
      cv::Rect r = cv::boundingRect(mask);
      obj.cx = (r.x + r.width / 2.0) / S;
      obj.cy = (r.y + r.height / 2.0) / S;
      obj.w = static_cast<double>(r.width) / S;
      obj.h = static_cast<double>(r.height) / S;
      out.objects.push_back(obj);
      break;
    }
  }
  out.bgr = img;
  return out;
}

// --- The dataset on disk ------------------------------------------------------------------------

SynthSummary write_synth_dataset(const SynthOptions& opt) {
  check_options(opt.img_size, opt.classes);
  Y9_CHECK_T(engine::ConfigError, opt.n_train >= 0 && opt.n_val >= 0, "synth: image counts must be >= 0, got ",
             opt.n_train, " train, ", opt.n_val, " val");
  Y9_CHECK_T(engine::ConfigError, !opt.out_dir.empty(), "synth: --out is required");
  const fs::path root(opt.out_dir);
  // Only a folder that synth made itself (marker file) may be rewritten: its stale-file clean-up
  // must never delete a user's images or labels.
  const fs::path marker = root / ".yolov9-synth";
  {
    std::error_code ec;
    const bool non_empty = fs::is_directory(root, ec) && fs::directory_iterator(root, ec) != fs::directory_iterator();
    Y9_CHECK_T(engine::IoError, !(fs::exists(root, ec) && !fs::is_directory(root, ec)), "synth: --out ", root.string(),
               " exists and is not a folder");
    Y9_CHECK_T(engine::IoError, !non_empty || fs::exists(marker, ec), "synth: refusing to write into ", root.string(),
               ": the folder is not empty and was not made by `yolov9 synth` (no ", marker.filename().string(),
               " file); choose a new or empty --out folder");
    fs::create_directories(root, ec);
    std::ofstream(marker) << "written by yolov9 synth; this folder may be rewritten by it\n";
  }
  SynthSummary sum;
  const char* splits[2] = {"train", "val"};
  const int64_t counts[2] = {opt.n_train, opt.n_val};
  for (int s = 0; s < 2; ++s) {
    fs::path idir = root / "images" / splits[s], ldir = root / "labels" / splits[s];
    std::error_code ec;
    fs::create_directories(idir, ec);
    Y9_CHECK_T(engine::IoError, !ec && fs::is_directory(idir), "synth: cannot create ", idir.string(), ": ",
               ec.message());
    fs::create_directories(ldir, ec);
    Y9_CHECK_T(engine::IoError, !ec && fs::is_directory(ldir), "synth: cannot create ", ldir.string(), ": ",
               ec.message());
    std::set<std::string> written;
    for (int64_t i = 0; i < counts[s]; ++i) {
      SynthImage im = synth_image(opt.img_size, opt.classes, opt.seed, s, i);
      char stem[32];
      std::snprintf(stem, sizeof(stem), "%06lld", static_cast<long long>(i));
      fs::path ip = idir / (std::string(stem) + ".jpg"), lp = ldir / (std::string(stem) + ".txt");
#ifdef Y9_NO_OPENCV_CODECS
      try {  // the GPU kit's build: libjpeg-turbo through io/image_u8 (other bytes than OpenCV's encoder)
        write_image_bgr(ip.string(), im.bgr, 95);
      } catch (const engine::IoError& e) {
        Y9_THROW(engine::IoError, "synth: ", e.message());
      }
#else
      bool ok = false;
      try {
        ok = cv::imwrite(ip.string(), im.bgr, {cv::IMWRITE_JPEG_QUALITY, 95});
      } catch (const cv::Exception& e) {
        Y9_THROW(engine::IoError, "synth: cannot write ", ip.string(), ": ", e.what());
      }
      Y9_CHECK_T(engine::IoError, ok, "synth: cannot write ", ip.string());
#endif
      std::ofstream f(lp);
      Y9_CHECK_T(engine::IoError, f.good(), "synth: cannot write ", lp.string());
      char line[128];
      for (const auto& o : im.objects) {
        std::snprintf(line, sizeof(line), "%d %.6f %.6f %.6f %.6f\n", o.cls, o.cx, o.cy, o.w, o.h);
        f << line;
      }
      f.close();
      Y9_CHECK_T(engine::IoError, !f.fail(), "synth: cannot write ", lp.string());
      written.insert(ip.filename().string());
      written.insert(lp.filename().string());
      sum.objects += static_cast<int64_t>(im.objects.size());
    }
    (s == 0 ? sum.train_images : sum.val_images) = counts[s];
    // Stale files of an earlier, larger run would silently join the dataset: remove them.
    for (const fs::path& d : {idir, ldir})
      for (const auto& e : fs::directory_iterator(d)) {
        std::string ext = e.path().extension().string();
        if (e.is_regular_file() && (ext == ".jpg" || ext == ".txt") && !written.count(e.path().filename().string()))
          fs::remove(e.path(), ec);
      }
    fs::remove(root / "labels" / (std::string(splits[s]) + ".cache"), ec);
  }
  const fs::path yp = root / "data.yaml";
  std::ofstream y(yp);
  Y9_CHECK_T(engine::IoError, y.good(), "synth: cannot write ", yp.string());
  auto names = synth_class_names(opt.classes);
  y << "# Synthetic shapes dataset written by `yolov9 synth` (seed " << opt.seed << ", " << opt.img_size
    << " px)\n";
  y << "path: .\ntrain: images/train\nval: images/val\n\nnc: " << opt.classes << "\nnames: [";
  for (size_t i = 0; i < names.size(); ++i) y << (i ? ", " : "") << "'" << names[i] << "'";
  y << "]\n";
  y.close();
  Y9_CHECK_T(engine::IoError, !y.fail(), "synth: cannot write ", yp.string());
  return sum;
}

}  // namespace io
