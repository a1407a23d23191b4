// The official letterbox (utils/augmentations.py letterbox, WongKinYiu/yolov9 5b1ea9a): resize and
// pad to a stride-aligned target. Its own file so that the inference build (Y9_INFERENCE_ONLY) links
// it without the augmentation pipeline of io/augment.cpp.
#include "io/letterbox.h"

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>

#include "engine/error.h"

namespace io {

namespace {
// Python round(): half to even (the default FE_TONEAREST mode of nearbyint).
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }
}  // namespace

LetterboxResult letterbox(const cv::Mat& im, int new_h, int new_w, bool auto_pad, bool scale_fill, bool scaleup,
                          int stride) {
  Y9_CHECK(!im.empty(), "letterbox: empty image");
  Y9_CHECK(new_h > 0 && new_w > 0 && stride > 0, "letterbox: bad target ", new_h, "x", new_w, " stride ", stride);
  const int h = im.rows, w = im.cols;
  double r = std::min(static_cast<double>(new_h) / h, static_cast<double>(new_w) / w);
  if (!scaleup) r = std::min(r, 1.0);
  LetterboxResult out;
  out.ratio_w = out.ratio_h = r;
  // At least 1 px a side (the official code lets cv2.resize fail on a 10000x50 image at 64 px).
  int nw = std::max(1, round_half_even(w * r)), nh = std::max(1, round_half_even(h * r));
  double dw = new_w - nw, dh = new_h - nh;
  if (auto_pad) {
    dw = std::fmod(dw, stride);
    dh = std::fmod(dh, stride);
  } else if (scale_fill) {
    dw = dh = 0;
    nw = new_w;
    nh = new_h;
    out.ratio_w = static_cast<double>(new_w) / w;
    out.ratio_h = static_cast<double>(new_h) / h;
  }
  dw /= 2;
  dh /= 2;
  cv::Mat resized;
  if (w != nw || h != nh)
    cv::resize(im, resized, cv::Size(nw, nh), 0, 0, cv::INTER_LINEAR);
  else
    resized = im;
  const int top = round_half_even(dh - 0.1), bottom = round_half_even(dh + 0.1);
  const int left = round_half_even(dw - 0.1), right = round_half_even(dw + 0.1);
  cv::copyMakeBorder(resized, out.img, top, bottom, left, right, cv::BORDER_CONSTANT, cv::Scalar(114, 114, 114));
  out.dw = dw;
  out.dh = dh;
  return out;
}

}  // namespace io
