// The OpenCV-free image path of the inference build (Y9_WITH_OPENCV=OFF, e.g. the aarch64 cross
// build): JPEG (libjpeg-turbo) and PNG (libpng) decode to BGR, a bilinear resize that repeats
// OpenCV 4.6's cv::resize(INTER_LINEAR) on uint8 bit for bit, the official letterbox on top of it,
// box drawing and JPEG/PNG encode. Compiled in every build, so that the full build's unit test
// (tests/io/image_u8_test.cpp) compares it with OpenCV on coco128.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace io {

/// An 8-bit 3-channel image: `data` is height x width x 3 uint8, BGR, rows packed (stride 3 * width).
struct ImageU8 {
  int height = 0, width = 0;
  std::vector<uint8_t> data;  ///< size 3 * height * width
  uint8_t* row(int y) { return data.data() + static_cast<size_t>(y) * width * 3; }
  const uint8_t* row(int y) const { return data.data() + static_cast<size_t>(y) * width * 3; }
  bool empty() const { return height <= 0 || width <= 0; }
};

/// Reads a JPEG or PNG file (recognised by its first bytes, not its name) as H x W x 3 uint8 BGR,
/// as cv::imread(path, IMREAD_COLOR) does: gray and palette images expanded to BGR, alpha dropped
/// (not blended), 16-bit PNG samples reduced to their high byte, CMYK JPEG converted as OpenCV's
/// icvCvt_CMYK2BGR, and for JPEG the EXIF orientation (tag 0x0112, 2..8) applied. JPEG decode
/// uses OpenCV's libjpeg settings (JCS_EXT_BGR, the default IDCT and upsampling), so pixels equal
/// cv::imread's when both use the same libjpeg-turbo. Throws engine::IoError naming the path when
/// the file is missing, empty, of another format (BMP, WebP, TIFF ...: "needs the OpenCV build"),
/// undecodable, or declares more than 2^30 pixels (OpenCV's default limit; refused before allocating).
ImageU8 read_image_u8(const std::string& path);

/// Resizes `src` (non-empty) to new_h x new_w (both >= 1) as OpenCV 4.6's
/// cv::resize(src, dst, Size(new_w, new_h), 0, 0, INTER_LINEAR) on x86-64 does for 8UC3: half-pixel
/// centres, 11-bit fixed-point weights (INTER_RESIZE_COEF_BITS), the vertical pass's
/// ((b0 (S0 >> 4)) >> 16) + ((b1 (S1 >> 4)) >> 16) + 2) >> 2 rounding, and an exact 2x downscale in both
/// directions done as INTER_AREA (a 2x2 mean), as OpenCV does. Throws engine::Error on an empty
/// source or a non-positive size.
ImageU8 resize_linear_u8(const ImageU8& src, int new_h, int new_w);

/// The official letterbox on an ImageU8, the same arithmetic as io::letterbox (io/letterbox.h):
/// r = min(new_h / h, new_w / w) (capped at 1 unless scaleup), new unpadded size
/// round-half-even(w r, h r) (at least 1), resize_linear_u8 when it differs, then a border of
/// value 114 (top/left = round(d - 0.1), bottom/right = round(d + 0.1)); with auto_pad the
/// padding is taken modulo `stride`. Fills the ratio and the half paddings (dw, dh) as
/// io::LetterboxResult does. Throws engine::Error on an empty image or a non-positive target.
struct LetterboxU8 {
  ImageU8 img;
  double ratio_w = 1, ratio_h = 1;
  double dw = 0, dh = 0;  ///< half paddings in pixels (floats)
};
LetterboxU8 letterbox_u8(const ImageU8& im, int new_h, int new_w, bool auto_pad = false, bool scaleup = true,
                         int stride = 32);

/// Draws the outline of the box (x1, y1)-(x2, y2) (pixels, truncated to int as the OpenCV path
/// does) in `color` (B, G, R) with line width lw >= 1, centred on the box edges as
/// cv::rectangle's thick lines are, clipped to the image. Not anti-aliased; no label text.
void draw_box_u8(ImageU8& im, float x1, float y1, float x2, float y2, const std::array<uint8_t, 3>& color, int lw);

/// Writes `im` (non-empty) as JPEG (quality 1..100; cv::imwrite's default is 95) when `path`
/// ends in .jpg/.jpeg (any case), as PNG otherwise when it ends in .png. Throws engine::IoError
/// naming the path when it cannot be written or has another extension.
void write_image_u8(const std::string& path, const ImageU8& im, int jpeg_quality = 95);

}  // namespace io
