// Fused per-pixel finishing of one training sample: official augment_hsv (cv2 BGR->HSV, three
// LUTs, HSV->BGR), np.flipud, np.fliplr and the HWC->CHW (RGB planes) collate, in one pass.
// Bitwise equal to io::apply_hsv + cv::flip + cv::split on the linked OpenCV: the kernels live in
// kernels/cpu/color.h; a one-time exhaustive check against cv::cvtColor (io/color.cpp) guards them.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>

#include "kernels/cpu/color.h"

namespace io {

/// Per-pixel finishing ops of one training sample, in the official order (augment_hsv, flipud,
/// fliplr; utils/dataloaders.py LoadImagesAndLabels.__getitem__ of WongKinYiu/yolov9): fields
/// hsv, gh, gs, gv (the hue / saturation / value gains of utils/augmentations.py augment_hsv),
/// flipud, fliplr. It is kernels::cpu::PixelOps, handed to the kernels unchanged.
using PixelOps = kernels::cpu::PixelOps;

/// Writes the H x W x 3 uint8 BGR image `bgr` (any row step) into three H*W uint8 planes
/// (dst_r, dst_g, dst_b: RGB order, row-major, contiguous, not aliasing `bgr`) after applying
/// `ops`: official augment_hsv (LUTs over 0..255: hue = uint8(fmod(x*gh, 180)), sat =
/// uint8(clip(x*gs, 0, 255)), val = uint8(clip(x*gv, 0, 255)), as io::apply_hsv), then
/// np.flipud, then np.fliplr. The result is bitwise equal to apply_hsv + cv::flip + cv::split.
/// Single-threaded (loader workers parallelise over samples). The first call with ops.hsv runs
/// the verification of fast_hsv_verified() (its row-tail part only once a row width needs it)
/// on the kernel it dispatches to (AVX-512 F/BW/VL/VBMI where the CPU has it, else AVX2+FMA); if
/// that failed, or the CPU lacks AVX2+FMA, the OpenCV reference path is used. Throws
/// engine::ShapeError for an empty or non-CV_8UC3 image, engine::Error for a null plane pointer.
void finish_to_planes(const cv::Mat& bgr, const PixelOps& ops, uint8_t* dst_r, uint8_t* dst_g, uint8_t* dst_b);

/// True when the fast HSV kernel finish_to_planes dispatches to on this CPU was verified bitwise
/// against cv::cvtColor of the linked OpenCV over the whole input domain: BGR2HSV on all 2^24
/// BGR values, HSV2BGR on all 180*256*256 HSV values, both in OpenCV's SIMD-block and row-tail
/// positions. Runs once (std::call_once; about 0.25 s on two cores, split over OpenCV's threads);
/// on a mismatch prints one warning line to stderr naming the first mismatching input and
/// returns false. finish_to_planes runs the row-tail part only for a row width that has a tail in
/// OpenCV (not a multiple of its 32-pixel AVX2 block; 640-wide mosaics have none).
bool fast_hsv_verified();

}  // namespace io
