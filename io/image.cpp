// Image decode with OpenCV (imdecode from a byte buffer so the file is read once).
#include "io/image.h"

#include <opencv2/imgcodecs.hpp>

#include <fstream>
#include <vector>

#include "engine/error.h"

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

cv::Mat read_image_bgr(const std::string& path) {
  std::vector<unsigned char> buf;
  Y9_CHECK_T(engine::IoError, read_bytes(path, buf), "cannot read image file: ", path);
  Y9_CHECK_T(engine::IoError, !buf.empty(), "image file is empty (0 bytes): ", path);
  cv::Mat img = cv::imdecode(buf, cv::IMREAD_COLOR);
  Y9_CHECK_T(engine::IoError, !img.empty(), "cannot decode image: ", path);
  return img;
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
  try {
    img = cv::imdecode(buf, cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    p.reason = std::string("cannot decode image: ") + e.what();
    return p;
  }
  if (img.empty()) {
    p.reason = "cannot identify image file (not a supported image)";
    return p;
  }
  p.width = img.cols;
  p.height = img.rows;
  if (p.width < 10 || p.height < 10) {
    p.reason = "image size " + std::to_string(p.width) + "x" + std::to_string(p.height) + " <10 pixels";
    return p;
  }
  p.ok = true;
  return p;
}

}  // namespace io
