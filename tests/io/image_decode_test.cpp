// Region-limited JPEG decode (io/image.h read_jpeg_rows_bgr) must give exactly the pixels of
// the full OpenCV decode inside the requested rectangle, and refuse what it cannot guarantee.
#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "engine/error.h"
#include "io/image.h"

namespace {

std::string write_jpeg(const std::string& name, int w, int h, int quality, bool gray) {
  cv::Mat im(h, w, CV_8UC3);
  cv::RNG rng(1234);
  rng.fill(im, cv::RNG::UNIFORM, 0, 256);
  cv::GaussianBlur(im, im, cv::Size(7, 7), 2.0);  // texture that is not pure noise
  cv::circle(im, {w / 3, h / 2}, h / 4, cv::Scalar(20, 200, 90), -1);
  if (gray) cv::cvtColor(im, im, cv::COLOR_BGR2GRAY);
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  cv::imwrite(path, im, {cv::IMWRITE_JPEG_QUALITY, quality});
  return path;
}

}  // namespace

TEST(JpegRegionDecode, EqualsFullDecodeInsideRegion) {
  std::mt19937 gen(7);
  for (auto [w, h] : {std::pair{640, 480}, std::pair{333, 517}, std::pair{97, 41}}) {
    const std::string path = write_jpeg("y9_region_" + std::to_string(w) + ".jpg", w, h, 90, false);
    const cv::Mat full = io::read_image_bgr(path);
    for (int trial = 0; trial < 40; ++trial) {
      int y0 = std::uniform_int_distribution<int>(0, h - 1)(gen), y1 = std::uniform_int_distribution<int>(y0 + 1, h)(gen);
      int x0 = std::uniform_int_distribution<int>(0, w - 1)(gen), x1 = std::uniform_int_distribution<int>(x0 + 1, w)(gen);
      cv::Mat part;
      ASSERT_TRUE(io::read_jpeg_rows_bgr(path, w, h, y0, y1, x0, x1, part));
      const cv::Rect r(x0, y0, x1 - x0, y1 - y0);
      ASSERT_EQ(cv::norm(part(r), full(r), cv::NORM_INF), 0.0) << w << "x" << h << " region " << r;
      // Straight into a view of a larger canvas: the region's pixels, nothing outside the view.
      cv::Mat canvas(r.height + 6, r.width + 10, CV_8UC3, cv::Scalar(7, 7, 7));
      const cv::Rect at(4, 3, r.width, r.height);
      ASSERT_TRUE(io::read_jpeg_region_bgr(path, w, h, r, canvas(at)));
      ASSERT_EQ(cv::norm(canvas(at), full(r), cv::NORM_INF), 0.0) << w << "x" << h << " region " << r;
      cv::Mat outside = canvas.clone();
      outside(at).setTo(cv::Scalar(7, 7, 7));
      ASSERT_EQ(cv::countNonZero(outside.reshape(1) != 7), 0) << "wrote outside the destination view";
    }
    std::filesystem::remove(path);
  }
}

TEST(JpegRegionDecode, RefusesWhatItCannotMatch) {
  const std::string path = write_jpeg("y9_region_gray.jpg", 64, 48, 90, true);
  cv::Mat part;
  EXPECT_FALSE(io::read_jpeg_rows_bgr(path, 64, 48, 0, 48, 0, 64, part));  // 1-component JPEG
  const std::string color = write_jpeg("y9_region_c.jpg", 64, 48, 90, false);
  EXPECT_FALSE(io::read_jpeg_rows_bgr(color, 65, 48, 0, 48, 0, 64, part));  // size mismatch
  EXPECT_FALSE(io::read_jpeg_rows_bgr(color, 64, 48, 10, 10, 0, 64, part));  // empty region
  cv::Mat dst(10, 10, CV_8UC3);
  EXPECT_FALSE(io::read_jpeg_region_bgr(path, 64, 48, cv::Rect(0, 0, 10, 10), dst));  // 1-component JPEG
  EXPECT_THROW(io::read_jpeg_region_bgr(color, 64, 48, cv::Rect(0, 0, 11, 10), dst), engine::ShapeError);
  std::filesystem::remove(path);
  std::filesystem::remove(color);
}

// A header declaring more than OpenCV's 2^30-pixel limit makes cv::imdecode throw cv::Exception;
// read_image_bgr must turn that into an IoError naming the file (detect then skips the image and
// goes on; a cv::Exception escaped as "unexpected failure" and ended the whole run).
TEST(ReadImageBgr, OversizeHeaderIsAnIoErrorNamingTheFile) {
  const std::string path = write_jpeg("y9_oversize.jpg", 64, 48, 90, false);
  std::string b;
  {
    std::ifstream f(path, std::ios::binary);
    b.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  bool patched = false;
  for (size_t i = 2; i + 9 < b.size();) {  // the SOF marker's height and width -> 60000 x 60000
    const auto m = static_cast<unsigned char>(b[i + 1]);
    const size_t len = static_cast<unsigned char>(b[i + 2]) << 8 | static_cast<unsigned char>(b[i + 3]);
    if (m == 0xC0 || m == 0xC1 || m == 0xC2) {
      b[i + 5] = b[i + 7] = static_cast<char>(0xEA);
      b[i + 6] = b[i + 8] = static_cast<char>(0x60);
      patched = true;
      break;
    }
    i += 2 + len;
  }
  ASSERT_TRUE(patched);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
  }
  try {
    io::read_image_bgr(path);
    FAIL() << "no error for a 60000x60000 header";
  } catch (const engine::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    FAIL() << "not an IoError: " << e.what();
  }
  std::filesystem::remove(path);
}
