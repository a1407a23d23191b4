// The detect loop of the inference build without OpenCV (Y9_WITH_OPENCV=OFF; apps/training/detector.h):
// detector.cpp's DetectRun on io::ImageU8 (io/image_u8.h). Same letterbox arithmetic, NMS, box
// mapping, log lines and txt labels; JPEG and PNG images only (a video or another image format is
// an error naming the file), boxes drawn without label text.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "apps/training/detector.h"
#include "engine/error.h"
#include "io/image_u8.h"
#include "io/paths.h"
#include "ops/nms.h"
#include "ops/ops.h"

namespace fs = std::filesystem;

namespace training {

using engine::DType;
using engine::Tensor;

namespace {

double det_now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string gfmt(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string det_class_name(const std::vector<std::string>& names, int64_t c) {
  return c >= 0 && c < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(c)] : std::to_string(c);
}

/// Official scale_boxes with the letterbox's ratio_pad, then round: det [n, 6] in place
/// (ops::scale_boxes_round_, the arithmetic of every build and device).
void boxes_to_original(Tensor& det, int H, int W, int h0, int w0) {
  const double gain = std::min(static_cast<double>(H) / h0, static_cast<double>(W) / w0);
  ops::scale_boxes_round_(det, gain, (W - w0 * gain) / 2, (H - h0 * gain) / 2, h0, w0);
}

// Official save_one_box(xyxy, imc, gain=1.02, pad=10, square=False, BGR=True).
void save_crop(const io::ImageU8& im, const float* xyxy, const fs::path& file) {
  const float cx = (xyxy[0] + xyxy[2]) / 2, cy = (xyxy[1] + xyxy[3]) / 2;
  const float w = (xyxy[2] - xyxy[0]) * 1.02f + 10, h = (xyxy[3] - xyxy[1]) * 1.02f + 10;
  auto clampi = [](float v, int hi) { return std::clamp(static_cast<int>(static_cast<int64_t>(v)), 0, hi); };
  const int x1 = clampi(cx - w / 2, im.width), x2 = clampi(cx + w / 2, im.width);
  const int y1 = clampi(cy - h / 2, im.height), y2 = clampi(cy + h / 2, im.height);
  if (x2 <= x1 || y2 <= y1) return;
  io::ImageU8 crop;
  crop.height = y2 - y1;
  crop.width = x2 - x1;
  crop.data.resize(static_cast<size_t>(crop.height) * crop.width * 3);
  for (int y = 0; y < crop.height; ++y)
    std::memcpy(crop.row(y), im.row(y1 + y) + 3 * x1, static_cast<size_t>(crop.width) * 3);
  fs::create_directories(file.parent_path());
  io::write_image_u8(io::increment_path(file.string()), crop, 95);
}

class DetectRun {
 public:
  DetectRun(const Predictor& predictor, const DetectOptions& o)
      : predictor_(predictor), o_(o), dir_(o.save_dir), save_img_(!o.nosave) {
    fs::create_directories(dir_);
    if (o.save_txt) fs::create_directories(dir_ / "labels");
    nms_.conf_thres = o.conf_thres;
    nms_.iou_thres = o.iou_thres;
    nms_.classes = o.classes;
    nms_.agnostic = o.agnostic_nms;
    nms_.multi_label = false;
    nms_.max_det = o.max_det;
  }

  void image_file(const SourceFile& src, int64_t count, int64_t nf) {
    const fs::path p(src.path);
    const std::string tag = "image " + std::to_string(count) + "/" + std::to_string(nf) + " " + src.path;
    io::ImageU8 im0;
    try {
      im0 = io::read_image_u8(src.path);
    } catch (const engine::IoError& e) {
      fail(tag + ": cannot read image (" + e.message() + "); skipped");
      return;
    }
    try {
      process(im0, src.path, tag + ": ", p.stem().string());
    } catch (const engine::IoError&) {
      throw;
    } catch (const engine::Error& e) {
      fail(tag + ": " + e.message() + "; skipped");
      return;
    }
    if (save_img_) {
      // JPEG and PNG sources only reach here; each is written in its own format under its name.
      // A JPEG or PNG under another image name (x.bmp, x.webp ...) cannot be written under that
      // name here: report it for this image and go on (its labels are written), do not end the run.
      const std::string out = (dir_ / p.filename()).string();
      std::string e = p.extension().string();
      for (char& ch : e) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (e != ".jpg" && e != ".jpeg" && e != ".png") {
        fail(tag + ": annotated image not saved: this build writes only .jpg/.jpeg and .png images (other formats "
                   "need the OpenCV build)");
        return;
      }
      io::write_image_u8(out, im0, 95);
      sum_.outputs.push_back(out);
    }
  }

  void video_file(const SourceFile& src, int64_t count, int64_t nf) {
    fail("video " + std::to_string(count) + "/" + std::to_string(nf) + " " + src.path +
         ": cannot open video: this yolov9 was built without OpenCV (Y9_WITH_OPENCV=OFF), which reads JPEG and PNG "
         "images only; skipped");
  }

  void skip(const std::string& msg) { fail(msg); }

  DetectSummary finish() {
    const double seen = std::max<double>(1.0, static_cast<double>(sum_.images));
    sum_.pre_ms = dt_pre_ / seen * 1e3;
    sum_.inf_ms = dt_inf_ / seen * 1e3;
    sum_.nms_ms = dt_nms_ / seen * 1e3;
    if (o_.print) {
      std::printf("Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape (1, 3, %d, %d)\n",
                  sum_.pre_ms, sum_.inf_ms, sum_.nms_ms, o_.imgsz, o_.imgsz);
      std::fflush(stdout);
    }
    return sum_;
  }

 private:
  void fail(const std::string& msg) {
    std::fprintf(stderr, "detect: ERROR %s\n", msg.c_str());
    std::fflush(stderr);
    sum_.errors.push_back(msg);
    ++sum_.failed;
  }

  void process(io::ImageU8& im0, const std::string& path, const std::string& prefix, const std::string& txt_stem) {
    ImageDetections r = detect_image(predictor_, im0, nms_, o_.imgsz, o_.device, path, &planes_);
    Tensor& det = r.det;
    dt_pre_ += r.pre_s;
    dt_inf_ += r.inf_s;
    dt_nms_ += r.nms_s;
    ++sum_.images;
    sum_.detections += det.size(0);
    write_outputs(im0, det, path, txt_stem);
    if (o_.print) {
      std::string s = prefix + std::to_string(r.h) + "x" + std::to_string(r.w) + " ";
      std::map<int64_t, int64_t> counts;
      const float* dp = det.data<float>();
      for (int64_t i = 0; i < det.size(0); ++i) ++counts[static_cast<int64_t>(dp[6 * i + 5])];
      for (const auto& [c, k] : counts)
        s += std::to_string(k) + " " + det_class_name(o_.names, c) + (k > 1 ? "s" : "") + ", ";
      std::printf("%s%s%.1fms\n", s.c_str(), det.size(0) ? "" : "(no detections), ", r.inf_s * 1e3);
      std::fflush(stdout);
    }
  }

  void write_outputs(io::ImageU8& im0, const Tensor& det, const std::string& path, const std::string& txt_stem) {
    const int64_t n = det.size(0);
    const float* dp = det.data<float>();
    const io::ImageU8 imc = o_.save_crop ? im0 : io::ImageU8();
    std::ofstream txt;
    if (o_.save_txt && n > 0) {
      const fs::path tp = dir_ / "labels" / (txt_stem + ".txt");
      txt.open(tp, std::ios::app);
      Y9_CHECK_T(engine::IoError, txt.good(), "cannot write ", tp.string());
    }
    const int lw = o_.line_thickness > 0
                       ? o_.line_thickness
                       : std::max(static_cast<int>(std::lround((im0.height + im0.width + 3) / 2.0 * 0.003)), 2);
    for (int64_t i = n - 1; i >= 0; --i) {  // official: reversed(det)
      const float* r = dp + 6 * i;
      const int64_t c = static_cast<int64_t>(r[5]);
      if (o_.save_txt) {
        const float cx = (r[0] + r[2]) / 2 / im0.width, cy = (r[1] + r[3]) / 2 / im0.height;
        const float w = (r[2] - r[0]) / im0.width, h = (r[3] - r[1]) / im0.height;
        txt << gfmt(r[5]) << ' ' << gfmt(cx) << ' ' << gfmt(cy) << ' ' << gfmt(w) << ' ' << gfmt(h);
        if (o_.save_conf) txt << ' ' << gfmt(r[4]);
        txt << '\n';
      }
      if (save_img_ || o_.save_crop) draw_box_u8(im0, r[0], r[1], r[2], r[3], class_color_bgr3(c), lw);
      if (o_.save_crop) {
        const std::string ext = ".jpg";  // as the OpenCV path
        save_crop(imc, r, dir_ / "crops" / det_class_name(o_.names, c) / (fs::path(path).stem().string() + ext));
      }
    }
  }

  const Predictor& predictor_;
  const DetectOptions& o_;
  fs::path dir_;
  bool save_img_;
  ops::NmsOptions nms_;
  io::PlanesBuffer planes_;  // the model input, reused across images
  DetectSummary sum_;
  double dt_pre_ = 0, dt_inf_ = 0, dt_nms_ = 0;
};

}  // namespace

ImageDetections detect_image(const Predictor& predictor, const io::ImageU8& im0, const ops::NmsOptions& nms, int imgsz,
                             engine::Device device, const std::string& path, io::PlanesBuffer* planes) {
  ImageDetections r;
  const io::LetterboxU8 lb = io::letterbox_u8(im0, imgsz, imgsz, /*auto_pad=*/true, true, 32);
  r.h = lb.img.height;
  r.w = lb.img.width;
  const double t0 = det_now_s();
  // RGB planes / 255 in one pass (the bits of (u8 planes).to(F32) / 255), into the reused buffer
  // on the CPU; another device gets a copy of it.
  Tensor im = io::bgr_to_rgb_planes_f32(lb.img.row(0), lb.img.height, lb.img.width,
                                        static_cast<size_t>(lb.img.width) * 3, device.is_cpu() ? planes : nullptr);
  if (!device.is_cpu()) im = im.to(device);
  io::Batch b;
  const double t1 = det_now_s();
  b.paths = {path};
  b.indices = {0};
  b.targets = Tensor::zeros({0, 6});
  Tensor pred = predictor(im, b);
  const double t2 = det_now_s();
  r.det = ops::non_max_suppression(pred, nms)[0].to(engine::Device::cpu()).to(DType::F32).contiguous().clone();
  const double t3 = det_now_s();
  r.pre_s = t1 - t0;
  r.inf_s = t2 - t1;
  r.nms_s = t3 - t2;
  boxes_to_original(r.det, r.h, r.w, im0.height, im0.width);
  return r;
}

DetectSummary run_detect(const Predictor& predictor, const std::string& source, const DetectOptions& o) {
  Y9_CHECK_T(engine::ConfigError, o.imgsz > 0, "detect: --img must be a positive number of pixels, got ", o.imgsz);
  std::vector<std::string> skipped;
  const std::vector<SourceFile> srcs = list_sources(source, &skipped);
  DetectRun run(predictor, o);
  for (const auto& msg : skipped) run.skip(msg);
  const int64_t nf = static_cast<int64_t>(srcs.size());
  int64_t count = 0;
  for (const auto& src : srcs) {
    ++count;
    if (src.video) run.video_file(src, count, nf);
    else run.image_file(src, count, nf);
  }
  return run.finish();
}

}  // namespace training
