// The official letterbox (utils/augmentations.py letterbox, WongKinYiu/yolov9 5b1ea9a): resize and
// pad to a stride-aligned target. Its own file so that the inference build (Y9_INFERENCE_ONLY) links
// it without the augmentation pipeline of io/augment.cpp.
#include "io/letterbox.h"

#include <algorithm>
#include <cmath>
#include <opencv2/core/utility.hpp>
#include <opencv2/imgproc.hpp>

#include "engine/error.h"

namespace io {

namespace {
// Python round(): half to even (the default FE_TONEAREST mode of nearbyint).
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }
}  // namespace

LetterboxGeometry letterbox_geometry(int h, int w, int new_h, int new_w, bool auto_pad, bool scale_fill,
                                     bool scaleup, int stride) {
  Y9_CHECK(h > 0 && w > 0, "letterbox: empty image (", w, "x", h, ")");
  Y9_CHECK(new_h > 0 && new_w > 0 && stride > 0, "letterbox: bad target ", new_h, "x", new_w, " stride ", stride);
  double r = std::min(static_cast<double>(new_h) / h, static_cast<double>(new_w) / w);
  if (!scaleup) r = std::min(r, 1.0);
  LetterboxGeometry g;
  g.ratio_w = g.ratio_h = r;
  // At least 1 px a side (the official code lets cv2.resize fail on a 10000x50 image at 64 px).
  g.nw = std::max(1, round_half_even(w * r));
  g.nh = std::max(1, round_half_even(h * r));
  double dw = new_w - g.nw, dh = new_h - g.nh;
  if (auto_pad) {
    dw = std::fmod(dw, stride);
    dh = std::fmod(dh, stride);
  } else if (scale_fill) {
    dw = dh = 0;
    g.nw = new_w;
    g.nh = new_h;
    g.ratio_w = static_cast<double>(new_w) / w;
    g.ratio_h = static_cast<double>(new_h) / h;
  }
  g.dw = dw / 2;
  g.dh = dh / 2;
  g.top = round_half_even(g.dh - 0.1);
  g.bottom = round_half_even(g.dh + 0.1);
  g.left = round_half_even(g.dw - 0.1);
  g.right = round_half_even(g.dw + 0.1);
  g.out_h = g.nh + g.top + g.bottom;
  g.out_w = g.nw + g.left + g.right;
  return g;
}

LetterboxResult letterbox(const cv::Mat& im, int new_h, int new_w, bool auto_pad, bool scale_fill, bool scaleup,
                          int stride) {
  Y9_CHECK(!im.empty(), "letterbox: empty image");
  const LetterboxGeometry g = letterbox_geometry(im.rows, im.cols, new_h, new_w, auto_pad, scale_fill, scaleup, stride);
  LetterboxResult out;
  out.ratio_w = g.ratio_w;
  out.ratio_h = g.ratio_h;
  cv::Mat resized;
  if (im.cols != g.nw || im.rows != g.nh)
    cv::resize(im, resized, cv::Size(g.nw, g.nh), 0, 0, cv::INTER_LINEAR);
  else
    resized = im;
  cv::copyMakeBorder(resized, out.img, g.top, g.bottom, g.left, g.right, cv::BORDER_CONSTANT,
                     cv::Scalar(114, 114, 114));
  out.dw = g.dw;
  out.dh = g.dh;
  return out;
}

kernels::LetterboxSample letterbox_sample(const LetterboxGeometry& g, int h, int w, int64_t off, int64_t step) {
  kernels::LetterboxSample s{};
  s.offset = off;
  s.step = step;
  s.h = h, s.w = w;
  s.nw = g.nw, s.nh = g.nh;
  s.top = g.top, s.left = g.left;
  return s;
}

void opencv_single_threaded() {
  static const bool done = [] {
    cv::setNumThreads(0);
    return true;
  }();
  (void)done;
}

}  // namespace io
