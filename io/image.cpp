// Image decode with OpenCV (imdecode from a byte buffer so the file is read once); without OpenCV's
// image codecs (Y9_NO_OPENCV_CODECS, the GPU kit) through io/image_u8 (libjpeg-turbo, libpng).
#include "io/image.h"

#ifdef Y9_NO_OPENCV_CODECS
#include <opencv2/imgproc.hpp>

#include "io/image_u8.h"
#else
#include <opencv2/imgcodecs.hpp>
#endif

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "engine/error.h"

extern "C" {
#include <jpeglib.h>
}

namespace io {

namespace {
bool read_bytes(const std::string& path, std::vector<unsigned char>& buf) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return false;
  std::streamsize n = f.tellg();
  if (n < 0) return false;
  buf.resize(static_cast<size_t>(n));
  f.seekg(0);
  return n == 0 || static_cast<bool>(f.read(reinterpret_cast<char*>(buf.data()), n));
}
}  // namespace

#ifdef Y9_NO_OPENCV_CODECS
namespace {
// The decoded ImageU8 as an owning CV_8UC3 matrix (throws engine::IoError as read_image_u8 does).
cv::Mat decode_u8(const std::string& path) {
  ImageU8 u = read_image_u8(path);
  return cv::Mat(u.height, u.width, CV_8UC3, u.data.data()).clone();
}
}  // namespace
#endif

void write_image_bgr(const std::string& path, const cv::Mat& img, int jpeg_quality) {
  Y9_CHECK_T(engine::IoError, !img.empty(), "cannot write ", path, ": empty image");
  Y9_CHECK_T(engine::IoError, img.depth() == CV_8U && (img.channels() == 1 || img.channels() == 3),
             "cannot write ", path, ": not an 8-bit 1- or 3-channel image");
#ifdef Y9_NO_OPENCV_CODECS
  cv::Mat bgr;
  if (img.channels() == 1)
    cv::cvtColor(img, bgr, cv::COLOR_GRAY2BGR);
  else
    bgr = img.isContinuous() ? img : img.clone();
  ImageU8 u;
  u.width = bgr.cols;
  u.height = bgr.rows;
  u.data.assign(bgr.data, bgr.data + static_cast<size_t>(3) * bgr.cols * bgr.rows);
  write_image_u8(path, u, jpeg_quality);
#else
  bool ok = false;
  try {
    ok = cv::imwrite(path, img, {cv::IMWRITE_JPEG_QUALITY, jpeg_quality});
  } catch (const cv::Exception& e) {
    Y9_THROW(engine::IoError, "cannot write ", path, ": ", e.err);
  }
  Y9_CHECK_T(engine::IoError, ok, "cannot write ", path);
#endif
}

cv::Mat read_image_bgr(const std::string& path) {
#ifdef Y9_NO_OPENCV_CODECS
  return decode_u8(path);
#else
  std::vector<unsigned char> buf;
  Y9_CHECK_T(engine::IoError, read_bytes(path, buf), "cannot read image file: ", path);
  Y9_CHECK_T(engine::IoError, !buf.empty(), "image file is empty (0 bytes): ", path);
  cv::Mat img;
  try {  // OpenCV throws (not returns empty) for a header over CV_IO_MAX_IMAGE_PIXELS (2^30)
    img = cv::imdecode(buf, cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    Y9_THROW(engine::IoError, "cannot decode image: ", path, ": ", e.err);
  }
  Y9_CHECK_T(engine::IoError, !img.empty(), "cannot decode image: ", path);
  return img;
#endif
}

ImageProbe probe_image(const std::string& path) {
  ImageProbe p;
  std::vector<unsigned char> buf;
  if (!read_bytes(path, buf)) {
    p.reason = "cannot read file";
    return p;
  }
  if (buf.empty()) {
    p.reason = "zero-byte file";
    return p;
  }
  const bool is_jpeg = buf.size() >= 2 && buf[0] == 0xFF && buf[1] == 0xD8;
  if (is_jpeg && !(buf.size() >= 4 && buf[buf.size() - 2] == 0xFF && buf[buf.size() - 1] == 0xD9)) {
    p.reason = "truncated JPEG (no FF D9 end marker)";
    return p;
  }
  cv::Mat img;
#ifdef Y9_NO_OPENCV_CODECS
  try {
    img = decode_u8(path);
  } catch (const std::exception& e) {
    p.reason = std::string("cannot decode image: ") + e.what();
    return p;
  }
#else
  try {
    img = cv::imdecode(buf, cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    p.reason = std::string("cannot decode image: ") + e.what();
    return p;
  }
#endif
  if (img.empty()) {
    p.reason = "cannot identify image file (not a supported image)";
    return p;
  }
  p.width = img.cols;
  p.height = img.rows;
  p.ok = true;  // the official size rule (< 10 px) is the scan's to apply: train drops, val keeps
  return p;
}

namespace {
struct JpegErr {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
};
void jpeg_err_exit(j_common_ptr c) { std::longjmp(reinterpret_cast<JpegErr*>(c->err)->jump, 1); }
void jpeg_err_silent(j_common_ptr, int) {}
}  // namespace

namespace {
// Decodes rows [y0, y1) x columns [x0, x1) of a JPEG and hands each decoded row to
// `sink(y, row)`, where row[0] is pixel (x0, y) in BGR. See read_jpeg_rows_bgr for when it
// refuses (returns false).
template <class Sink>
bool decode_jpeg_region(const std::string& path, int expect_w, int expect_h, int y0, int y1, int x0, int x1,
                        Sink&& sink) {
#ifndef JCS_EXTENSIONS
  return false;
#else
  thread_local std::vector<unsigned char> buf;
  thread_local std::vector<unsigned char> line;
  Y9_CHECK_T(engine::IoError, read_bytes(path, buf), "cannot read image file: ", path);
  if (buf.size() < 4 || buf[0] != 0xFF || buf[1] != 0xD8) return false;
  if (y0 < 0 || y1 > expect_h || y0 >= y1 || x0 < 0 || x1 > expect_w || x0 >= x1) return false;
  jpeg_decompress_struct cinfo;
  JpegErr err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_err_exit;
  err.mgr.emit_message = jpeg_err_silent;
  volatile bool ok = false;
  jpeg_create_decompress(&cinfo);
  if (setjmp(err.jump) == 0) {
    jpeg_mem_src(&cinfo, buf.data(), static_cast<unsigned long>(buf.size()));
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    bool exif = false;
    for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next)
      if (m->marker == JPEG_APP0 + 1 && m->data_length >= 4 && std::memcmp(m->data, "Exif", 4) == 0) exif = true;
    if (!exif && cinfo.num_components == 3 && cinfo.jpeg_color_space == JCS_YCbCr &&
        static_cast<int>(cinfo.image_width) == expect_w && static_cast<int>(cinfo.image_height) == expect_h) {
      cinfo.out_color_space = JCS_EXT_BGR;  // as OpenCV 4.6 grfmt_jpeg.cpp with libjpeg-turbo
      cinfo.out_color_components = 3;
      jpeg_start_decompress(&cinfo);
      // Columns: decode [x0 - 32, x1 + 32) (libjpeg widens it to iMCU edges); the 32-pixel
      // margin keeps the fancy-upsampling edge columns of the cropped band out of [x0, x1).
      JDIMENSION cx = static_cast<JDIMENSION>(std::max(0, x0 - 32));
      JDIMENSION cw = static_cast<JDIMENSION>(std::min(expect_w, x1 + 32)) - cx;
      if (cw < static_cast<JDIMENSION>(expect_w)) jpeg_crop_scanline(&cinfo, &cx, &cw);
      line.resize(static_cast<size_t>(cinfo.output_width) * 3);
      if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
      const size_t off = (static_cast<size_t>(x0) - cx) * 3;
      while (static_cast<int>(cinfo.output_scanline) < y1) {
        const int y = static_cast<int>(cinfo.output_scanline);
        JSAMPROW row = line.data();
        jpeg_read_scanlines(&cinfo, &row, 1);
        sink(y, line.data() + off);
      }
      ok = true;
    }
  }
  jpeg_destroy_decompress(&cinfo);
  return ok;
#endif
}
}  // namespace

bool read_jpeg_rows_bgr(const std::string& path, int expect_w, int expect_h, int y0, int y1, int x0, int x1,
                        cv::Mat& out) {
  out.create(expect_h, expect_w, CV_8UC3);
  const size_t n = static_cast<size_t>(x1 - x0) * 3;
  return decode_jpeg_region(path, expect_w, expect_h, y0, y1, x0, x1, [&](int y, const uint8_t* row) {
    std::memcpy(out.ptr<uint8_t>(y) + 3 * x0, row, n);
  });
}

bool read_jpeg_region_bgr(const std::string& path, int expect_w, int expect_h, const cv::Rect& region, cv::Mat dst) {
  Y9_CHECK_SHAPE(dst.type() == CV_8UC3 && dst.rows == region.height && dst.cols == region.width,
                 "read_jpeg_region_bgr: destination is ", dst.cols, "x", dst.rows, " type ", dst.type(), ", region is ",
                 region.width, "x", region.height, " CV_8UC3");
  const size_t n = static_cast<size_t>(region.width) * 3;
  return decode_jpeg_region(path, expect_w, expect_h, region.y, region.y + region.height, region.x,
                            region.x + region.width, [&](int y, const uint8_t* row) {
                              std::memcpy(dst.ptr<uint8_t>(y - region.y), row, n);
                            });
}

}  // namespace io
