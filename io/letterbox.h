// The official letterbox: resize with the aspect ratio kept and pad to a stride-aligned target
// (utils/augmentations.py letterbox, WongKinYiu/yolov9 5b1ea9a). Shared by detection, validation
// and the training pipeline; the inference build links only this part of the image pipeline.
#pragma once

#include <cstdint>

#include <opencv2/core.hpp>

#include "kernels/common/augment.h"

namespace io {

struct LetterboxResult {
  cv::Mat img;             ///< H_t x W_t x 3 uint8 BGR (or stride-padded when auto)
  double ratio_w = 1, ratio_h = 1;
  double dw = 0, dh = 0;   ///< half paddings in pixels (floats)
};

/// The geometry of letterbox() for an h x w image (h, w >= 1), without pixels: scale, resized
/// size nw x nh (at least 1 px a side), half paddings dw, dh and their integer borders (top/left =
/// round(d - 0.1), bottom/right = round(d + 0.1), round half to even as Python's round), and the
/// output size out_h = nh + top + bottom, out_w = nw + left + right. Units: pixels.
/// Throws engine::Error on a non-positive size, target or stride.
struct LetterboxGeometry {
  double ratio_w = 1, ratio_h = 1;
  double dw = 0, dh = 0;
  int nw = 0, nh = 0;
  int top = 0, bottom = 0, left = 0, right = 0;
  int out_w = 0, out_h = 0;
};
LetterboxGeometry letterbox_geometry(int h, int w, int new_h, int new_w, bool auto_pad = false,
                                     bool scale_fill = false, bool scaleup = true, int stride = 32);

/// Official letterbox(im, new_shape=(new_h, new_w), color 114, auto, scaleFill, scaleup, stride):
/// r = min(H_t/h, W_t/w) (<= 1 unless scaleup), new size = round-half-even(w*r, h*r), resize
/// with INTER_LINEAR, border top/left = round(d-0.1), bottom/right = round(d+0.1). `im` is
/// H x W x 3 uint8. Throws engine::Error on an empty image or non-positive target.
LetterboxResult letterbox(const cv::Mat& im, int new_h, int new_w, bool auto_pad = false, bool scale_fill = false,
                          bool scaleup = true, int stride = 32);

/// The kLetterbox record (kernels/common/augment.h) that letterboxes an h x w x 3 uint8 BGR image,
/// stored at arena byte offset `off` with row step `step` bytes, with geometry `g` (of
/// letterbox_geometry(h, w, ...)): the bytes of letterbox() on a device. Shared by the GPU
/// augmentation's non-mosaic samples (io/augment_device.cpp) and `detect --device` (detector.cpp).
kernels::LetterboxSample letterbox_sample(const LetterboxGeometry& g, int h, int w, int64_t off, int64_t step);

/// cv::setNumThreads(0), once per process, as the official utils/dataloaders.py does at import
/// (train, val and detect all import it): OpenCV then runs its functions on the calling thread. Its
/// pool (TBB in Debian's build) would otherwise fan a small resize out onto threads that compete
/// with the engine's OpenMP threads for the same cores. Called by DataLoader's constructor and by
/// training::run_detect (`yolov9 detect`), not by the embeddable detect_image; thread-safe.
void opencv_single_threaded();

}  // namespace io
