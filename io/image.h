// Image decode with OpenCV: every accepted format read as 8-bit 3-channel BGR with the EXIF
// orientation applied, plus the validity check used by the dataset scan (official
// verify_image_label image part, utils/dataloaders.py, WongKinYiu/yolov9 5b1ea9a).
#pragma once

#include <opencv2/core.hpp>

#include <string>

namespace io {

/// Result of checking one image file.
struct ImageProbe {
  bool ok = false;         ///< decodable, not truncated (any size; see ScanOptions::min_image_px)
  std::string reason;      ///< why not ok (names the problem, not the path)
  int width = 0;           ///< pixels after EXIF orientation
  int height = 0;
};

/// Reads `path` as H x W x 3 uint8 BGR (cv::IMREAD_COLOR: gray, RGBA and 16-bit inputs are
/// converted, 16-bit by dropping the low byte; EXIF orientation applied by OpenCV 4.6).
/// Throws engine::IoError naming the path when the file is missing, empty or undecodable.
/// In a build without OpenCV's image codecs (Y9_NO_OPENCV_CODECS: the GPU device kit, which links
/// only OpenCV core and imgproc) the file is decoded by io::read_image_u8 instead (JPEG and PNG only,
/// the same pixels for JPEG with the same libjpeg-turbo; other formats throw engine::IoError).
cv::Mat read_image_bgr(const std::string& path);

/// Writes `img` (non-empty, 8-bit, 1 or 3 channels, BGR) to `path`, the format chosen by the
/// extension, as cv::imwrite(path, img, {IMWRITE_JPEG_QUALITY, jpeg_quality}) does (95 is OpenCV's
/// default). Without OpenCV's image codecs (Y9_NO_OPENCV_CODECS) JPEG and PNG only, through
/// io::write_image_u8. Throws engine::IoError naming the path when it cannot be written or the
/// extension is not supported.
void write_image_bgr(const std::string& path, const cv::Mat& img, int jpeg_quality = 95);

/// Decodes `path` fully and checks it like the official scan: non-empty file, decodable by
/// OpenCV, and for JPEG the last two bytes must be FF D9. The size (after EXIF orientation) is
/// reported; the official "< 10 pixels" rule is applied by io::scan_dataset. A JPEG without its end marker is rejected (the official code rewrites it in
/// place; we never write to a dataset). Never throws for bad files (see `reason`).
ImageProbe probe_image(const std::string& path);

/// Decodes only rows [y0, y1) x columns [x0, x1) of a JPEG into `out` (H x W x 3 uint8 BGR;
/// other pixels are left unspecified), with the same libjpeg(-turbo) settings cv::imdecode uses, so the rows are
/// bitwise those of read_image_bgr. Rows before y0 are skipped (jpeg_skip_scanlines: entropy
/// decoding only), decoding stops after y1, and columns outside [x0 - 32, x1 + 32) are cropped
/// (jpeg_crop_scanline). Returns false, without throwing, whenever this
/// path cannot guarantee that equality (not a 3-component YCbCr JPEG, an Exif block that may
/// carry an orientation, a size other than `expect_w` x `expect_h`, a libjpeg error): the caller
/// then uses read_image_bgr. Throws engine::IoError only when the file cannot be read.
bool read_jpeg_rows_bgr(const std::string& path, int expect_w, int expect_h, int y0, int y1, int x0, int x1,
                        cv::Mat& out);

/// Like read_jpeg_rows_bgr, but writes exactly the pixels of `region` (within the expect_w x
/// expect_h image) into `dst`, a region.height x region.width CV_8UC3 matrix that may be a view
/// into a larger image (e.g. a mosaic canvas): each scanline is decoded into a row buffer and
/// only the region's columns are copied. Same refusals (returns false, `dst` then partly
/// written). Throws engine::IoError when the file cannot be read, engine::ShapeError when `dst`
/// does not have the region's size and type.
bool read_jpeg_region_bgr(const std::string& path, int expect_w, int expect_h, const cv::Rect& region, cv::Mat dst);

}  // namespace io
