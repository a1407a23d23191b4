// io::finish_to_planes against the OpenCV reference (io::apply_hsv + cv::flip + cv::split): the
// exhaustive kernel verification, random and natural-looking images of odd sizes and every row
// width 1..70 (OpenCV's SIMD-block / row-tail split), ROI input, flips, gains, every kernel path.
#include <gtest/gtest.h>

#include <opencv2/core/utility.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/error.h"
#include "io/augment.h"
#include "io/color.h"
#include "io/color_internal.h"
#include "kernels/cpu/color.h"

namespace {

using io::color_detail::Path;

/// The official order, written with the existing OpenCV calls: the reference of this test.
std::vector<uint8_t> expected_planes(const cv::Mat& bgr, const io::PixelOps& ops) {
  cv::Mat img = bgr.clone();
  if (ops.hsv) io::apply_hsv(img, ops.gh, ops.gs, ops.gv);
  if (ops.flipud) cv::flip(img, img, 0);
  if (ops.fliplr) cv::flip(img, img, 1);
  std::vector<cv::Mat> ch;
  cv::split(img, ch);
  const size_t n = static_cast<size_t>(img.rows) * img.cols;
  std::vector<uint8_t> out(3 * n);
  for (int c = 0; c < 3; ++c) std::memcpy(out.data() + c * n, ch[2 - c].data, n);  // R, G, B
  return out;
}

std::vector<uint8_t> run_path(const cv::Mat& bgr, const io::PixelOps& ops, Path path) {
  const size_t n = static_cast<size_t>(bgr.rows) * bgr.cols;
  std::vector<uint8_t> out(3 * n, 0xCD);
  io::color_detail::finish_to_planes(bgr, ops, out.data(), out.data() + n, out.data() + 2 * n, path);
  return out;
}

std::vector<Path> paths() {
  std::vector<Path> p{Path::Auto, Path::Reference, Path::Scalar};
  if (kernels::cpu::cpu_has_avx2_fma()) p.push_back(Path::Avx2);
  if (kernels::cpu::cpu_has_avx512vbmi()) p.push_back(Path::Avx512);
  return p;
}

/// Name of the variant finish_to_planes dispatches to on this CPU.
std::string primary_name() {
  return kernels::cpu::cpu_has_avx512vbmi() ? "avx512vbmi" : kernels::cpu::cpu_has_avx2_fma() ? "avx2" : "scalar";
}

const char* path_name(Path p) {
  switch (p) {
    case Path::Auto: return "auto";
    case Path::Reference: return "reference";
    case Path::Scalar: return "scalar";
    case Path::Avx2: return "avx2";
    case Path::Avx512: return "avx512vbmi";
  }
  return "?";
}

cv::Mat random_image(int h, int w, uint64_t seed) {
  cv::Mat m(h, w, CV_8UC3);
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, 0, 256);
  return m;
}

cv::Mat natural_image(int h, int w, uint64_t seed) {
  cv::Mat m = random_image(h, w, seed);
  cv::GaussianBlur(m, m, cv::Size(0, 0), 3.0);
  return m;
}

struct Gains {
  double gh, gs, gv;
};
// Default-range extremes (hsv_h 0.015, hsv_s 0.7, hsv_v 0.4), identity, saturation 0 and 255.
const Gains kGains[] = {{1.0, 1.0, 1.0},    {0.985, 0.3, 0.6}, {1.015, 1.7, 1.4}, {1.007, 0.55, 1.21},
                        {0.991, 0.0, 1.0},  {1.0, 255.0, 0.9}, {1.3, 3.0, 0.05}};

/// Every path, flip combination, hsv on/off and gain triple on one image.
void check_image(const cv::Mat& img, const std::string& what) {
  for (int flips = 0; flips < 4; ++flips)
    for (int hsv = 0; hsv < 2; ++hsv)
      for (const Gains& g : kGains) {
        if (!hsv && &g != &kGains[0]) continue;
        io::PixelOps ops;
        ops.hsv = hsv, ops.gh = g.gh, ops.gs = g.gs, ops.gv = g.gv;
        ops.flipud = flips & 1, ops.fliplr = flips & 2;
        const std::vector<uint8_t> want = expected_planes(img, ops);
        for (Path p : paths()) {
          const std::vector<uint8_t> got = run_path(img, ops, p);
          ASSERT_TRUE(got == want) << what << " " << img.rows << "x" << img.cols << " path " << path_name(p)
                                   << " hsv " << hsv << " gains " << g.gh << "," << g.gs << "," << g.gv
                                   << " flipud " << ops.flipud << " fliplr " << ops.fliplr;
        }
      }
}

}  // namespace

void print_info(const io::color_detail::VerifyInfo& info) {
  std::printf("%s kernel: %s in %.3f s (%s); OpenCV HSV2BGR SIMD block %d px, SIMD rule [%s], tail rule [%s]\n",
              info.variant.c_str(), info.ok ? "verified" : "FAILED", info.seconds, info.steps.c_str(), info.simd_block,
              info.simd_rule.c_str(), info.tail_rule.c_str());
}

TEST(FinishToPlanes, ExhaustiveVerificationPasses) {
  // The one-time check of the kernel finish_to_planes dispatches to (AVX-512 VBMI, else AVX2).
  ASSERT_TRUE(io::fast_hsv_verified()) << io::color_detail::verify_info().message;
  const auto& info = io::color_detail::verify_info();
  print_info(info);
  EXPECT_TRUE(info.message.empty());
  EXPECT_EQ(info.variant, primary_name());
}

TEST(FinishToPlanes, ExhaustiveVerificationOfEveryVariant) {
  // The variants this CPU does not dispatch to get the same exhaustive check (fresh model search).
  const auto& primary = io::color_detail::verify_info();
  for (Path p : paths()) {
    if (p == Path::Auto || p == Path::Reference || path_name(p) == primary_name()) continue;
    const io::color_detail::VerifyInfo info = io::color_detail::verify_now(p);
    print_info(info);
    EXPECT_TRUE(info.ok) << info.message;
    EXPECT_EQ(info.simd_block, primary.simd_block);
    EXPECT_EQ(info.simd_rule, primary.simd_rule);
    EXPECT_EQ(info.tail_rule, primary.tail_rule);
  }
}

TEST(FinishToPlanes, OddSizesEqualOpenCV) {
  cv::setNumThreads(0);
  check_image(random_image(1, 1, 1), "random");
  check_image(random_image(7, 13, 2), "random");
  check_image(natural_image(7, 13, 3), "natural");
  check_image(random_image(641, 639, 4), "random");
  check_image(natural_image(641, 639, 5), "natural");
}

TEST(FinishToPlanes, EveryRowWidthUpTo70) {
  // Widths around OpenCV's SIMD block (pixels past the last full block take its scalar tail).
  for (int w = 1; w <= 70; ++w) {
    check_image(random_image(5, w, 100 + w), "random");
    check_image(natural_image(4, w, 200 + w), "natural");
  }
}

TEST(FinishToPlanes, MosaicSizeEqualsOpenCV) { check_image(natural_image(640, 640, 7), "natural"); }

TEST(FinishToPlanes, NonContinuousRoi) {
  const cv::Mat big = natural_image(120, 150, 8);
  const cv::Mat roi = big(cv::Rect(3, 5, 101, 77));
  ASSERT_FALSE(roi.isContinuous());
  check_image(roi, "roi");
  check_image(random_image(90, 90, 9)(cv::Rect(1, 2, 33, 40)), "roi");
}

TEST(FinishToPlanes, BadInputThrows) {
  std::vector<uint8_t> buf(3 * 64);
  uint8_t *r = buf.data(), *g = r + 64, *b = g + 64;
  io::PixelOps ops;
  ops.hsv = true;
  EXPECT_THROW(io::finish_to_planes(cv::Mat(), ops, r, g, b), engine::ShapeError);
  EXPECT_THROW(io::finish_to_planes(cv::Mat(4, 4, CV_8UC1), ops, r, g, b), engine::ShapeError);
  EXPECT_THROW(io::finish_to_planes(cv::Mat(4, 4, CV_8UC4), ops, r, g, b), engine::ShapeError);
  EXPECT_THROW(io::finish_to_planes(cv::Mat(4, 4, CV_32FC3), ops, r, g, b), engine::ShapeError);
  EXPECT_THROW(io::finish_to_planes(cv::Mat(4, 4, CV_8UC3), ops, nullptr, g, b), engine::Error);
}
