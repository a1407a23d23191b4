// The detect loop (official detect_dual.py run(), WongKinYiu/yolov9 5b1ea9a; shared/spec/eval.md
// section 6) over images, folders, globs, .txt lists and video files, with annotated outputs,
// YOLO txt labels and crops (apps/detector.h). The source listing and the class colours are in
// sources.cpp, shared with detect_nocv.cpp (the loop of the build without OpenCV).
#include "apps/training/detector.h"

#include <opencv2/imgproc.hpp>
#ifndef Y9_NO_OPENCV_CODECS
#include <opencv2/videoio.hpp>
#endif

#include <algorithm>
#include <cctype>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/error.h"
#include "engine/pinned_allocator.h"
#include "kernels/common/augment.h"
#include "io/letterbox.h"
#include "io/image.h"
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

// Official save_one_box(xyxy, imc, gain=1.02, pad=10, square=False, BGR=True).
void save_crop(const cv::Mat& im, const float* xyxy, const fs::path& file) {
  const float cx = (xyxy[0] + xyxy[2]) / 2, cy = (xyxy[1] + xyxy[3]) / 2;
  const float w = (xyxy[2] - xyxy[0]) * 1.02f + 10, h = (xyxy[3] - xyxy[1]) * 1.02f + 10;
  auto clampi = [](float v, int hi) { return std::clamp(static_cast<int>(static_cast<int64_t>(v)), 0, hi); };
  const int x1 = clampi(cx - w / 2, im.cols), x2 = clampi(cx + w / 2, im.cols);
  const int y1 = clampi(cy - h / 2, im.rows), y2 = clampi(cy + h / 2, im.rows);
  if (x2 <= x1 || y2 <= y1) return;
  fs::create_directories(file.parent_path());
  const fs::path f = io::increment_path(file.string());
  io::write_image_bgr(f.string(), im(cv::Rect(x1, y1, x2 - x1, y2 - y1)), 95);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

cv::Scalar class_color_bgr(int64_t c) {
  const std::array<uint8_t, 3> b = class_color_bgr3(c);
  return cv::Scalar(b[0], b[1], b[2]);
}

void box_label(cv::Mat& im, float x1, float y1, float x2, float y2, const std::string& label, const cv::Scalar& color,
               int lw) {
  cv::Point p1(static_cast<int>(x1), static_cast<int>(y1)), p2(static_cast<int>(x2), static_cast<int>(y2));
  cv::rectangle(im, p1, p2, color, lw, cv::LINE_AA);
  if (label.empty()) return;
  const int tf = std::max(lw - 1, 1);
  int base = 0;
  const cv::Size ts = cv::getTextSize(label, cv::FONT_HERSHEY_SIMPLEX, lw / 3.0, tf, &base);
  const bool outside = p1.y - ts.height >= 3;
  cv::Point q2(p1.x + ts.width, outside ? p1.y - ts.height - 3 : p1.y + ts.height + 3);
  cv::rectangle(im, p1, q2, color, -1, cv::LINE_AA);
  cv::putText(im, label, cv::Point(p1.x, outside ? p1.y - 2 : p1.y + ts.height + 2), cv::FONT_HERSHEY_SIMPLEX, lw / 3.0,
              cv::Scalar(255, 255, 255), tf, cv::LINE_AA);
}

namespace {

/// Official scale_boxes with the letterbox's ratio_pad, then round: det [n, 6] in place, on its
/// device (ops::scale_boxes_round_).
void boxes_to_original(Tensor& det, int H, int W, int h0, int w0) {
  const double gain = std::min(static_cast<double>(H) / h0, static_cast<double>(W) / w0);
  ops::scale_boxes_round_(det, gain, (W - w0 * gain) / 2, (H - h0 * gain) / 2, h0, w0);
}

/// The letterbox of `im0` (geometry g) on CUDA `device`: one upload of the original pixels (and
/// the kernels::LetterboxSample record) and one kLetterbox launch that writes the model input
/// [1, 3, H, W] F32 RGB = u8 / 255 directly (the bytes of io::letterbox, then the CPU path's
/// division).
Tensor letterbox_on_device(const cv::Mat& im0, const io::LetterboxGeometry& g, engine::Device device) {
  const int64_t rec = 64, row = 3 * static_cast<int64_t>(im0.cols);
  Tensor host = engine::empty_from_allocator(engine::pinned_host_allocator(), {rec + row * im0.rows}, DType::U8);
  uint8_t* base = host.data<uint8_t>();
  const kernels::LetterboxSample s = io::letterbox_sample(g, im0.rows, im0.cols, rec, row);
  std::memcpy(base, &s, sizeof s);
  for (int y = 0; y < im0.rows; ++y) std::memcpy(base + rec + row * y, im0.ptr<uint8_t>(y), static_cast<size_t>(row));
  const Tensor arena = host.to(device);
  Tensor out = Tensor::empty({1, 3, g.out_h, g.out_w}, DType::F32, device);
  auto k = engine::kernel(kernels::kLetterbox, DType::F32, device);
  const uint8_t* d = static_cast<const uint8_t*>(arena.data_ptr());
  k.fn(k.ctx, DType::F32, d, reinterpret_cast<const kernels::LetterboxSample*>(d), 1, g.out_h, g.out_w,
       kernels::AugLayout::ChwRgb, out.data_ptr());
  return out;
}

/// One detect run over a source list, in named steps: per image or frame, letterbox ->
/// predictor -> NMS -> boxes to the original image -> log line, txt labels, boxes, crops.
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
    cv::Mat im0;
    try {
      im0 = io::read_image_bgr(src.path);
    } catch (const engine::IoError& e) {
      fail(tag + ": cannot read image (" + e.message() + "); skipped");
      return;
    }
    // One bad image (a size the model cannot take, an OpenCV failure) must not stop the run.
    try {
      process(im0, src.path, tag + ": ", p.stem().string());
    } catch (const engine::IoError&) {
      throw;  // an output that cannot be written: every later image would fail the same way
    } catch (const engine::Error& e) {
      fail(tag + ": " + e.message() + "; skipped");
      return;
    } catch (const cv::Exception& e) {
      fail(tag + ": OpenCV failed on this image (" + e.err + "); skipped");
      return;
    }
    if (save_img_) {
      std::string out = (dir_ / p.filename()).string();
#ifdef Y9_NO_OPENCV_CODECS
      // This build writes JPEG and PNG only: another extension (.tif, .webp, .bmp, .mpo...) is saved
      // as <stem>.jpg rather than failing the run.
      std::string ext = p.extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
      if (ext != ".jpg" && ext != ".jpeg" && ext != ".png") out = (dir_ / (p.stem().string() + ".jpg")).string();
#endif
      io::write_image_bgr(out, im0);
      sum_.outputs.push_back(out);
    }
  }

  void video_file(const SourceFile& src, int64_t count, int64_t nf) {
    const fs::path p(src.path);
    const std::string tag = "video " + std::to_string(count) + "/" + std::to_string(nf);
#ifdef Y9_NO_OPENCV_CODECS
    (void)p;
    fail(tag + " " + src.path + ": this build has no video support (OpenCV core and imgproc only: the GPU kit); skipped");
#else
    cv::VideoCapture cap(src.path);
    if (!cap.isOpened()) {
      fail(tag + " " + src.path + ": cannot open video; skipped");
      return;
    }
    const int stride = std::max(1, o_.vid_stride);
    const int64_t frames = static_cast<int64_t>(cap.get(cv::CAP_PROP_FRAME_COUNT) / stride);
    double fps = cap.get(cv::CAP_PROP_FPS);
    if (!(fps > 0) || !std::isfinite(fps)) fps = 30;
    cv::VideoWriter writer;
    const std::string out = (dir_ / (p.stem().string() + ".mp4")).string();
    int64_t frame = 0;
    for (;;) {
      for (int k = 0; k < stride; ++k) cap.grab();
      cv::Mat im0;
      if (!cap.retrieve(im0) || im0.empty()) break;
      ++frame;
      const std::string ftag = tag + " (" + std::to_string(frame) + "/" + std::to_string(frames) + ") " + src.path;
      try {
        process(im0, src.path, ftag + ": ", p.stem().string() + "_" + std::to_string(frame));
      } catch (const engine::IoError&) {
        throw;
      } catch (const engine::Error& e) {
        fail(ftag + ": " + e.message() + "; rest of the video skipped");
        return;
      } catch (const cv::Exception& e) {
        fail(ftag + ": OpenCV failed on this frame (" + e.err + "); rest of the video skipped");
        return;
      }
      if (save_img_) {
        if (!writer.isOpened()) {
          writer.open(out, cv::VideoWriter::fourcc('m', 'p', '4', 'v'), fps, im0.size());
          Y9_CHECK_T(engine::IoError, writer.isOpened(), "cannot write video ", out);
          sum_.outputs.push_back(out);
        }
        writer.write(im0);
      }
    }
    if (frame == 0)
      fail(tag + " " + src.path + ": no readable frame; skipped");
    else if (frame < frames)
      fail(tag + " " + src.path + ": frame " + std::to_string(frame + 1) + " of " + std::to_string(frames) +
           " unreadable; rest of the video skipped");
#endif
  }

  /// A source entry that could not be listed (a missing file in a .txt list): reported, counted.
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

  /// One image or frame: im0 is annotated in place.
  void process(cv::Mat& im0, const std::string& path, const std::string& prefix, const std::string& txt_stem) {
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

  /// txt labels, boxes on im0 and crops for det [n, 6] in original-image pixels.
  void write_outputs(cv::Mat& im0, const Tensor& det, const std::string& path, const std::string& txt_stem) {
    const int64_t n = det.size(0);
    const float* dp = det.data<float>();
    cv::Mat imc = o_.save_crop ? im0.clone() : cv::Mat();
    std::ofstream txt;
    if (o_.save_txt && n > 0) {
      const fs::path tp = dir_ / "labels" / (txt_stem + ".txt");
      txt.open(tp, std::ios::app);
      Y9_CHECK_T(engine::IoError, txt.good(), "cannot write ", tp.string());
    }
    const int lw = o_.line_thickness > 0
                       ? o_.line_thickness
                       : std::max(static_cast<int>(std::lround((im0.rows + im0.cols + 3) / 2.0 * 0.003)), 2);
    for (int64_t i = n - 1; i >= 0; --i) {  // official: reversed(det)
      const float* r = dp + 6 * i;
      const int64_t c = static_cast<int64_t>(r[5]);
      if (o_.save_txt) {
        const float cx = (r[0] + r[2]) / 2 / im0.cols, cy = (r[1] + r[3]) / 2 / im0.rows;
        const float w = (r[2] - r[0]) / im0.cols, h = (r[3] - r[1]) / im0.rows;
        txt << gfmt(r[5]) << ' ' << gfmt(cx) << ' ' << gfmt(cy) << ' ' << gfmt(w) << ' ' << gfmt(h);
        if (o_.save_conf) txt << ' ' << gfmt(r[4]);
        txt << '\n';
      }
      if (save_img_ || o_.save_crop) {
        std::string label;
        if (!o_.hide_labels) {
          label = det_class_name(o_.names, c);
          if (!o_.hide_conf) {
            char b2[32];
            std::snprintf(b2, sizeof b2, " %.2f", r[4]);
            label += b2;
          }
        }
        box_label(im0, r[0], r[1], r[2], r[3], label, class_color_bgr(c), lw);
      }
      if (o_.save_crop)
        save_crop(imc, r, dir_ / "crops" / det_class_name(o_.names, c) / (fs::path(path).stem().string() + ".jpg"));
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

ImageDetections detect_image(const Predictor& predictor, const cv::Mat& im0, const ops::NmsOptions& nms, int imgsz,
                             engine::Device device, const std::string& path, io::PlanesBuffer* planes) {
  ImageDetections r;
  Y9_CHECK_T(engine::IoError, !im0.empty() && im0.type() == CV_8UC3, "detect: ", path.empty() ? "image" : path,
             " is not a non-empty 8-bit 3-channel image");
  io::Batch b;
  b.paths = {path};
  b.indices = {0};
  b.targets = Tensor::zeros({0, 6});
  Tensor im;
  double t0 = 0;
  if (device.is_cuda()) {  // letterbox on the device: only the original pixels go up
    const io::LetterboxGeometry g = io::letterbox_geometry(im0.rows, im0.cols, imgsz, imgsz, /*auto_pad=*/true, false,
                                                           true, 32);
    r.h = g.out_h;
    r.w = g.out_w;
    t0 = det_now_s();
    im = letterbox_on_device(im0, g, device);
  } else {
    io::LetterboxResult lb = io::letterbox(im0, imgsz, imgsz, /*auto_pad=*/true, false, true, 32);
    r.h = lb.img.rows;
    r.w = lb.img.cols;
    t0 = det_now_s();
    // RGB planes / 255 in one pass, into the reused buffer (the bits of (u8 planes).to(F32) / 255).
    im = io::bgr_to_rgb_planes_f32(lb.img.ptr<uint8_t>(), lb.img.rows, lb.img.cols, lb.img.step[0], planes);
  }
  const double t1 = det_now_s();
  Tensor pred = predictor(im, b);
  // NMS and the letterbox undo on the prediction's device; only the kept rows come back.
  const double t2 = det_now_s();
  Tensor det = ops::non_max_suppression(pred, nms)[0].to(DType::F32).contiguous().clone();
  boxes_to_original(det, r.h, r.w, im0.rows, im0.cols);
  r.det = det.to(engine::Device::cpu());
  const double t3 = det_now_s();
  r.pre_s = t1 - t0;
  r.inf_s = t2 - t1;
  r.nms_s = t3 - t2;
  return r;
}

DetectSummary run_detect(const Predictor& predictor, const std::string& source, const DetectOptions& o) {
  Y9_CHECK_T(engine::ConfigError, o.imgsz > 0, "detect: --img must be a positive number of pixels, got ", o.imgsz);
  // As the official detect_dual.py through its import of dataloaders.py (not in detect_image: an
  // application embedding the library keeps its OpenCV threads).
  io::opencv_single_threaded();
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
