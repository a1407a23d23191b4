// Test helpers: build tiny YOLO datasets (images + labels) in a fresh temporary folder.
#pragma once

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "io/dataset.h"
#include "io/image.h"

namespace tiny {

namespace fs = std::filesystem;

/// A fresh temporary directory, removed when the object dies.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    std::random_device rd;
    path = fs::temp_directory_path() / ("y9_" + tag + "_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

inline void write_text(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << s;
}

inline std::vector<unsigned char> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const fs::path& p, const std::vector<unsigned char>& b) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// Random-ish BGR image (deterministic from `seed`).
inline cv::Mat make_image(int w, int h, int seed = 1, int type = CV_8UC3) {
  cv::Mat m(h, w, type);
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, 0, type == CV_16UC1 || type == CV_16UC3 ? 65535 : 255);
  return m;
}

inline void write_image(const fs::path& p, const cv::Mat& m) {
  fs::create_directories(p.parent_path());
#ifdef Y9_NO_OPENCV_CODECS
  io::write_image_bgr(p.string(), m);  // the GPU kit's build (OpenCV core/imgproc only)
#else
  cv::imwrite(p.string(), m);
#endif
}

/// A JPEG of w x h whose EXIF orientation tag is `orientation` (6 = rotate 90 degrees clockwise).
inline void write_exif_jpeg(const fs::path& p, int w, int h, int orientation) {
  std::vector<unsigned char> jpg;
  cv::imencode(".jpg", make_image(w, h, 3), jpg);
  std::vector<unsigned char> app1 = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0,
                                     'I', 'I', 0x2A, 0, 8, 0, 0, 0,           // TIFF header, IFD at 8
                                     1, 0,                                     // one entry
                                     0x12, 0x01, 3, 0, 1, 0, 0, 0,             // Orientation, SHORT, 1
                                     static_cast<unsigned char>(orientation), 0, 0, 0,
                                     0, 0, 0, 0};                              // no next IFD
  size_t len = app1.size() - 2;
  app1[2] = static_cast<unsigned char>(len >> 8);
  app1[3] = static_cast<unsigned char>(len & 0xFF);
  jpg.insert(jpg.begin() + 2, app1.begin(), app1.end());
  write_bytes(p, jpg);
}

/// n PNG images i0.png .. in `d`, (30 + 5i) x 40 px, with one box on every image but each
/// fourth: the records the DataLoader tests share.
inline std::vector<io::ImageRecord> loader_records(const fs::path& d, int n) {
  std::vector<io::ImageRecord> recs;
  for (int i = 0; i < n; ++i) {
    io::ImageRecord r;
    r.image_path = (d / ("i" + std::to_string(i) + ".png")).string();
    write_image(r.image_path, make_image(30 + 5 * i, 40, i));
    r.width = 30 + 5 * i;
    r.height = 40;
    if (i % 4) r.labels = {{static_cast<float>(i % 2), 0.5f, 0.5f, 0.6f, 0.6f}};
    recs.push_back(r);
  }
  return recs;
}

}  // namespace tiny
