// Temporary reference implementation of io/color.h (replaced by the fused kernel branch).
#include "io/color.h"

#include <opencv2/core.hpp>

#include "engine/error.h"
#include "io/augment.h"

namespace io {

bool fast_hsv_verified() { return false; }

void finish_to_planes(const cv::Mat& bgr, const PixelOps& ops, uint8_t* dst_r, uint8_t* dst_g, uint8_t* dst_b) {
  Y9_CHECK_SHAPE(!bgr.empty() && bgr.type() == CV_8UC3, "finish_to_planes: need a non-empty CV_8UC3 image");
  cv::Mat img = bgr.clone();
  if (ops.hsv) apply_hsv(img, ops.gh, ops.gs, ops.gv);
  if (ops.flipud) cv::flip(img, img, 0);
  if (ops.fliplr) cv::flip(img, img, 1);
  cv::Mat planes[3] = {cv::Mat(img.rows, img.cols, CV_8U, dst_b), cv::Mat(img.rows, img.cols, CV_8U, dst_g),
                       cv::Mat(img.rows, img.cols, CV_8U, dst_r)};
  cv::split(img, planes);
}

}  // namespace io
