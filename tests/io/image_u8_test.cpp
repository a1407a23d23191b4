// The OpenCV-free image path (io/image_u8.h) against OpenCV on coco128: decode equal to
// cv::imread, resize equal to cv::resize(INTER_LINEAR) (the max difference and the share of
// differing values are printed), letterbox equal to io::letterbox, EXIF orientations as
// cv::imread applies them, JPEG/PNG writing, and the errors.
#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/error.h"
#include "io/image_u8.h"
#include "io/letterbox.h"
#include "io/planes.h"
#include "ops/ops.h"
#include "tests/testutil.h"

namespace fs = std::filesystem;

namespace {

io::ImageU8 from_mat(const cv::Mat& m) {
  io::ImageU8 im;
  im.height = m.rows;
  im.width = m.cols;
  im.data.resize(static_cast<size_t>(m.rows) * m.cols * 3);
  for (int y = 0; y < m.rows; ++y) std::memcpy(im.row(y), m.ptr<uint8_t>(y), static_cast<size_t>(m.cols) * 3);
  return im;
}

struct Diff {
  int max = 0;
  int64_t differing = 0, total = 0;
};

void accumulate(Diff& d, const io::ImageU8& a, const cv::Mat& b) {
  ASSERT_EQ(a.height, b.rows);
  ASSERT_EQ(a.width, b.cols);
  for (int y = 0; y < a.height; ++y) {
    const uint8_t* p = a.row(y);
    const uint8_t* q = b.ptr<uint8_t>(y);
    for (int x = 0; x < 3 * a.width; ++x) {
      const int e = std::abs(p[x] - q[x]);
      d.max = std::max(d.max, e);
      d.differing += e != 0;
    }
  }
  d.total += static_cast<int64_t>(a.height) * a.width * 3;
}

std::vector<std::string> coco_images() {
  const std::string coco = testutil::coco128_dir();
  return testutil::glob_files(coco + "/images/train2017", "*.jpg");
}

}  // namespace

TEST(ImageU8, DecodeEqualsImread) {
  const auto files = coco_images();
  if (files.empty()) GTEST_SKIP() << "coco128 missing";
  Diff d;
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    accumulate(d, io::read_image_u8(f), cv::imread(f, cv::IMREAD_COLOR));
  }
  std::printf("decode: %zu coco128 JPEGs, max |ours - cv::imread| %d, differing values %lld of %lld\n", files.size(),
              d.max, static_cast<long long>(d.differing), static_cast<long long>(d.total));
  EXPECT_EQ(d.max, 0);
}

TEST(ImageU8, ResizeEqualsCvResizeOnCoco128) {
  const auto files = coco_images();
  if (files.empty()) GTEST_SKIP() << "coco128 missing";
  Diff d;
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    const cv::Mat m = cv::imread(f, cv::IMREAD_COLOR);
    const io::ImageU8 im = from_mat(m);
    std::vector<std::pair<int, int>> sizes;  // (h, w): detect's letterbox sizes, then odd ones, up and down
    for (int s : {128, 320, 640}) {
      const double r = std::min(static_cast<double>(s) / m.rows, static_cast<double>(s) / m.cols);
      sizes.push_back({std::max(1, static_cast<int>(std::nearbyint(m.rows * r))),
                       std::max(1, static_cast<int>(std::nearbyint(m.cols * r)))});
    }
    sizes.push_back({m.rows / 2, m.cols / 2});  // exact 2x: OpenCV switches to INTER_AREA
    sizes.push_back({m.rows * 3 / 2 + 1, m.cols * 5 / 4 + 3});
    sizes.push_back({77, 101});
    sizes.push_back({1, 3});
    for (auto [h, w] : sizes) {
      if (h < 1 || w < 1 || (h == m.rows && w == m.cols)) continue;
      cv::Mat ref;
      cv::resize(m, ref, cv::Size(w, h), 0, 0, cv::INTER_LINEAR);
      accumulate(d, io::resize_linear_u8(im, h, w), ref);
    }
  }
  std::printf("resize: max |ours - cv::resize INTER_LINEAR| %d, differing values %lld of %lld (%.3g)\n", d.max,
              static_cast<long long>(d.differing), static_cast<long long>(d.total),
              static_cast<double>(d.differing) / static_cast<double>(d.total));
  EXPECT_EQ(d.max, 0);
}

TEST(ImageU8, LetterboxEqualsIoLetterbox) {
  const auto files = coco_images();
  if (files.empty()) GTEST_SKIP() << "coco128 missing";
  Diff d;
  for (size_t i = 0; i < files.size(); i += 4) {
    const cv::Mat m = cv::imread(files[i], cv::IMREAD_COLOR);
    for (int s : {64, 128, 320, 640}) {
      SCOPED_TRACE(files[i] + " at " + std::to_string(s));
      const io::LetterboxResult ref = io::letterbox(m, s, s, true, false, true, 32);
      const io::LetterboxU8 ours = io::letterbox_u8(from_mat(m), s, s, true, true, 32);
      accumulate(d, ours.img, ref.img);
      EXPECT_EQ(ours.dw, ref.dw);
      EXPECT_EQ(ours.dh, ref.dh);
      EXPECT_EQ(ours.ratio_w, ref.ratio_w);
    }
  }
  std::printf("letterbox: max |ours - io::letterbox| %d over %lld values\n", d.max, static_cast<long long>(d.total));
  EXPECT_EQ(d.max, 0);
}

TEST(ImageU8, ExifOrientationAsImread) {
  const auto files = coco_images();
  if (files.empty()) GTEST_SKIP() << "coco128 missing";
  const fs::path dir = fs::temp_directory_path() / ("y9_image_u8_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // a small non-square JPEG, then the same bytes with an APP1 Exif block (little-endian TIFF,
  // IFD0 with one entry: Orientation) right after SOI
  const cv::Mat m = cv::imread(files[0], cv::IMREAD_COLOR)(cv::Rect(0, 0, 37, 23)).clone();
  const std::string plain = (dir / "plain.jpg").string();
  io::write_image_u8(plain, from_mat(m), 90);
  std::ifstream in(plain, std::ios::binary);
  const std::vector<uint8_t> jpg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (int o = 1; o <= 8; ++o) {
    SCOPED_TRACE("orientation " + std::to_string(o));
    const uint8_t tiff[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0,
                            static_cast<uint8_t>(o), 0, 0, 0, 0, 0, 0, 0};
    std::vector<uint8_t> app1 = {'E', 'x', 'i', 'f', 0, 0};
    app1.insert(app1.end(), std::begin(tiff), std::end(tiff));
    const size_t len = app1.size() + 2;
    std::vector<uint8_t> out = {0xFF, 0xD8, 0xFF, 0xE1, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len & 0xFF)};
    out.insert(out.end(), app1.begin(), app1.end());
    out.insert(out.end(), jpg.begin() + 2, jpg.end());
    const std::string f = (dir / ("o" + std::to_string(o) + ".jpg")).string();
    std::ofstream(f, std::ios::binary).write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    const cv::Mat ref = cv::imread(f, cv::IMREAD_COLOR);
    const io::ImageU8 ours = io::read_image_u8(f);
    EXPECT_EQ(ref.rows, o >= 5 ? 37 : 23);
    Diff d;
    accumulate(d, ours, ref);
    EXPECT_EQ(d.max, 0);
  }
  fs::remove_all(dir);
}

// A stray marker inside the entropy-coded data: libjpeg warns, fills the rest of the scan and only
// fails in jpeg_finish_decompress ("Unsupported marker type"). cv::imread keeps the image decoded
// so far (OpenCV sets its result before jpeg_finish_decompress); read_image_u8 must too, with the
// same pixels (it refused the file, so detect without OpenCV skipped images the OpenCV build reads).
TEST(ImageU8, StrayMarkerInScanAsImread) {
  const auto files = coco_images();
  if (files.empty()) GTEST_SKIP() << "coco128 missing";
  std::ifstream in(files[0], std::ios::binary);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t sos = 2;
  while (sos + 4 < b.size() && !(b[sos] == 0xFF && b[sos + 1] == 0xDA)) sos += 2 + (b[sos + 2] << 8 | b[sos + 3]);
  ASSERT_LT(sos + 4, b.size()) << "no SOS in " << files[0];
  size_t pos = sos + 2 + (b[sos + 2] << 8 | b[sos + 3]) + (b.size() - sos) / 2;
  while (b[pos - 1] == 0xFF || b[pos] == 0xFF || b[pos + 1] == 0xFF) ++pos;
  b[pos] = 0xFF;
  b[pos + 1] = 0x55;
  const fs::path f = fs::temp_directory_path() / ("y9_image_u8_marker_" + std::to_string(::getpid()) + ".jpg");
  std::ofstream(f, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  const cv::Mat ref = cv::imread(f.string(), cv::IMREAD_COLOR);
  ASSERT_FALSE(ref.empty()) << "cv::imread refuses the file; the premise of the test does not hold";
  io::ImageU8 ours;
  try {
    ours = io::read_image_u8(f.string());
  } catch (const engine::Error& e) {
    fs::remove(f);
    FAIL() << e.what();
  }
  fs::remove(f);
  Diff d;
  accumulate(d, ours, ref);
  EXPECT_EQ(d.max, 0);
}

// Decoding a large JPEG must not hold two copies of the image (the EXIF orientation step copied
// the decoded image even for orientation 1: twice OpenCV's peak memory, 6.3 GB against 3.4 GB on
// a 32768 x 32767 header). Measured in a child process: the rise of its peak RSS.
TEST(ImageU8, LargeJpegDecodePeakMemoryIsOneImage) {
  io::ImageU8 big;
  big.height = 4000;
  big.width = 6000;
  big.data.assign(static_cast<size_t>(big.height) * big.width * 3, 128);
  const std::string f =
      (fs::temp_directory_path() / ("y9_image_u8_big_" + std::to_string(::getpid()) + ".jpg")).string();
  io::write_image_u8(f, big, 90);
  big = io::ImageU8();
  const double image_mb = 4000.0 * 6000 * 3 / (1 << 20);  // 68.7 MiB
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rusage r0{}, r1{};
    ::getrusage(RUSAGE_SELF, &r0);
    const io::ImageU8 im = io::read_image_u8(f);
    ::getrusage(RUSAGE_SELF, &r1);
    const double rise_mb = (r1.ru_maxrss - r0.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
    std::printf("decode 6000x4000: peak RSS rose %.1f MiB for a %.1f MiB image\n", rise_mb, image_mb);
    std::fflush(stdout);
    ::_exit(im.width == 6000 && rise_mb < 1.5 * image_mb ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  fs::remove(f);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the decode held more than 1.5 images at its peak";
}

TEST(ImageU8, WriteReadBackAndDraw) {
  const fs::path dir = fs::temp_directory_path() / ("y9_image_u8_w" + std::to_string(::getpid()));
  fs::create_directories(dir);
  io::ImageU8 im;
  im.height = 40;
  im.width = 60;
  im.data.assign(40 * 60 * 3, 114);
  io::draw_box_u8(im, 10, 5, 50, 30, {255, 56, 56}, 3);
  EXPECT_EQ(im.row(5)[3 * 20], 255);      // on the top edge
  EXPECT_EQ(im.row(5)[3 * 20 + 2], 56);
  EXPECT_EQ(im.row(15)[3 * 30], 114);     // inside: untouched
  io::draw_box_u8(im, -10, -10, 100, 100, {0, 0, 0}, 2);  // clipped, no crash
  const std::string png = (dir / "a.png").string(), jpg = (dir / "a.JPG").string();
  io::write_image_u8(png, im);
  io::write_image_u8(jpg, im, 95);
  Diff d;
  accumulate(d, io::read_image_u8(png), cv::imread(png, cv::IMREAD_COLOR));
  accumulate(d, im, cv::imread(png, cv::IMREAD_COLOR));
  EXPECT_EQ(d.max, 0);
  const cv::Mat j = cv::imread(jpg, cv::IMREAD_COLOR);
  EXPECT_EQ(j.rows, 40);
  EXPECT_EQ(j.cols, 60);
  EXPECT_THROW(io::write_image_u8((dir / "a.bmp").string(), im), engine::IoError);
  EXPECT_THROW(io::read_image_u8((dir / "missing.jpg").string()), engine::IoError);
  std::ofstream((dir / "text.jpg").string()) << "not an image";
  EXPECT_THROW(io::read_image_u8((dir / "text.jpg").string()), engine::IoError);
  std::ofstream((dir / "trunc.jpg").string(), std::ios::binary) << "\xFF\xD8\xFF\xE0";
  EXPECT_THROW(io::read_image_u8((dir / "trunc.jpg").string()), engine::IoError);
  {  // a JPEG whose frame header declares 60000 x 60000 pixels: refused before allocating
    std::ifstream in(jpg, std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t i = 0; i + 9 < b.size(); ++i)
      if (b[i] == 0xFF && b[i + 1] == 0xC0) {
        b[i + 5] = b[i + 7] = 0xEA;  // 0xEA60 = 60000
        b[i + 6] = b[i + 8] = 0x60;
        break;
      }
    const std::string huge = (dir / "huge.jpg").string();
    std::ofstream(huge, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    try {
      io::read_image_u8(huge);
      ADD_FAILURE() << "no error for a 60000x60000 JPEG";
    } catch (const engine::IoError& e) {
      EXPECT_NE(e.message().find("2^30"), std::string::npos) << e.message();
    }
  }
  EXPECT_THROW(io::resize_linear_u8(im, 0, 5), engine::Error);
  EXPECT_THROW(io::letterbox_u8(io::ImageU8(), 64, 64), engine::Error);
  fs::remove_all(dir);
}

// io::bgr_to_rgb_planes_f32 (the detect path's model input): the bits of the two-op form
// (uint8 RGB planes).to(F32) / 255, a padded row stride honoured, the buffer reused only when no
// tensor still views it, and bad shapes refused.
TEST(Planes, EqualsPlanesDividedBy255AndReusesTheBufferOnlyWhenFree) {
  using engine::DType;
  using engine::Tensor;
  const int64_t H = 37, W = 53;
  const size_t step = 3 * W + 7;  // padded rows
  std::vector<uint8_t> bgr(step * H);
  for (size_t i = 0; i < bgr.size(); ++i) bgr[i] = static_cast<uint8_t>((i * 7919u + 13u) % 256u);
  // The former two-op form: uint8 RGB planes, then .to(F32) / 255 through ops::div.
  auto two_op = [&](int64_t h) {
    Tensor u8 = Tensor::empty({1, 3, h, W}, DType::U8);
    uint8_t* d = u8.data<uint8_t>();
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < W; ++x)
        for (int64_t c = 0; c < 3; ++c) d[(c * h + y) * W + x] = bgr[y * step + 3 * x + (2 - c)];
    return ops::div(u8.to(DType::F32), Tensor::full({1}, 255.0, DType::F32));
  };
  const Tensor want = two_op(H);

  io::PlanesBuffer buf;
  Tensor a = io::bgr_to_rgb_planes_f32(bgr.data(), H, W, step, &buf);
  ASSERT_EQ(a.shape(), (engine::Shape{1, 3, H, W}));
  ASSERT_EQ(a.dtype(), DType::F32);
  EXPECT_EQ(a.to_vector<float>(), want.to_vector<float>());
  EXPECT_EQ(io::bgr_to_rgb_planes_f32(bgr.data(), H, W, step).to_vector<float>(), want.to_vector<float>());

  // `a` still views the buffer: a second call must not overwrite it.
  std::vector<uint8_t> other(bgr.size(), 0);
  const float* pa = a.data<float>();
  Tensor b = io::bgr_to_rgb_planes_f32(other.data(), H, W, step, &buf);
  EXPECT_NE(b.data<float>(), pa);
  EXPECT_EQ(a.to_vector<float>(), want.to_vector<float>());
  // A view of b also holds it.
  Tensor view = b.reshape({3, H, W});
  const float* pb = b.data<float>();
  b = Tensor();
  Tensor c = io::bgr_to_rgb_planes_f32(bgr.data(), H, W, step, &buf);
  EXPECT_NE(c.data<float>(), pb);
  EXPECT_EQ(view.to_vector<float>(), std::vector<float>(static_cast<size_t>(3 * H * W), 0.0f));
  // Dropped: the next same-sized call writes into the same memory.
  const float* pc = c.data<float>();
  c = Tensor();
  view = Tensor();
  Tensor e = io::bgr_to_rgb_planes_f32(other.data(), H, W, step, &buf);
  EXPECT_EQ(e.data<float>(), pc);
  EXPECT_EQ(e.to_vector<float>(), std::vector<float>(static_cast<size_t>(3 * H * W), 0.0f));
  e = Tensor();
  // Another size: new memory, right values.
  Tensor f = io::bgr_to_rgb_planes_f32(bgr.data(), H - 1, W, step, &buf);
  ASSERT_EQ(f.shape(), (engine::Shape{1, 3, H - 1, W}));
  EXPECT_EQ(f.to_vector<float>(), two_op(H - 1).to_vector<float>());

  EXPECT_THROW(io::bgr_to_rgb_planes_f32(bgr.data(), 0, W, step), engine::ShapeError);
  EXPECT_THROW(io::bgr_to_rgb_planes_f32(bgr.data(), H, 0, step), engine::ShapeError);
  EXPECT_THROW(io::bgr_to_rgb_planes_f32(bgr.data(), H, W, 3 * W - 1), engine::ShapeError);
  EXPECT_THROW(io::bgr_to_rgb_planes_f32(nullptr, H, W, step), engine::Error);
}
