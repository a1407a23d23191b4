// io::warp_affine_axis_aligned against cv::warpAffine (the linked OpenCV) bitwise: thousands of random
// sources (1x1 .. 1300x1300, ROI views), output sizes, loader-like matrices (io::perspective_matrix),
// exact scales, flips, huge/tiny scales, every 1/32 fraction, border values; every kernel path;
// refusals; the self-check; and proof that a kernel with an off-by-one rounding constant fails.
#include <gtest/gtest.h>

#include <opencv2/core/utility.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "io/augment.h"
#include "io/warp.h"
#include "kernels/cpu/warp.h"

namespace {

using io::warp_detail::Path;

struct Case {
  cv::Mat src;  // may be a non-continuous ROI view
  cv::Matx23d M;
  cv::Size dsize;
  int border = 114;
  std::string what;
};

cv::Mat random_source(cv::RNG& rng, int h, int w, bool roi) {
  if (!roi) {
    cv::Mat m(h, w, CV_8UC3);
    rng.fill(m, cv::RNG::UNIFORM, 0, 256);
    return m;
  }
  const int px = rng.uniform(1, 9), py = rng.uniform(0, 5);
  cv::Mat big(h + py + rng.uniform(0, 3), w + px + rng.uniform(1, 4), CV_8UC3);
  rng.fill(big, cv::RNG::UNIFORM, 0, 256);
  return big(cv::Rect(px, py, w, h));
}

int random_extent(cv::RNG& rng, int small_max, int big_max) {
  return rng.uniform(0, 20) == 0 ? rng.uniform(1, big_max + 1) : rng.uniform(1, small_max + 1);
}

/// The random case generator: `kind` cycles over the matrix families.
Case random_case(cv::RNG& rng, int i) {
  Case c;
  const int sh = random_extent(rng, 160, 1300), sw = random_extent(rng, 160, 1300);
  c.src = random_source(rng, sh, sw, rng.uniform(0, 4) == 0);
  c.dsize = cv::Size(random_extent(rng, 150, 640), random_extent(rng, 150, 640));
  c.border = rng.uniform(0, 6) == 0 ? rng.uniform(0, 256) : 114;
  const int dw = c.dsize.width, dh = c.dsize.height;
  switch (i % 6) {
    case 0: {  // the loader's matrix: scale U(0.1, 1.9), translation 0.5 +- 0.1 of the output
      io::PerspectiveParams p;
      p.scale = rng.uniform(0.1, 1.9);
      p.tx_frac = rng.uniform(0.4, 0.6);
      p.ty_frac = rng.uniform(0.4, 0.6);
      const cv::Matx33d M = io::perspective_matrix(p, sw, sh, dw, dh);
      c.M = cv::Matx23d(M(0, 0), M(0, 1), M(0, 2), M(1, 0), M(1, 1), M(1, 2));
      c.what = "loader";
      break;
    }
    case 1: {  // independent scales, translations putting the image partly or fully outside
      const double sx = rng.uniform(0.05, 2.5), sy = rng.uniform(0.05, 2.5);
      c.M = cv::Matx23d(sx, 0, rng.uniform(-2.0 * dw, 2.0 * dw), 0, sy, rng.uniform(-2.0 * dh, 2.0 * dh));
      c.what = "partly/fully outside";
      break;
    }
    case 2: {  // exact integer (and dyadic) scales and integer translations
      const double scales[] = {1, 1, 2, 3, 0.5, 0.25, 4};
      const double s = scales[rng.uniform(0, 7)], t = scales[rng.uniform(0, 7)];
      c.M = cv::Matx23d(s, 0, rng.uniform(-40, 40), 0, t, rng.uniform(-40, 40));
      c.what = "integer";
      break;
    }
    case 3: {  // flips (negative scales) on one or both axes
      const double sx = rng.uniform(0.2, 2.0) * (rng.uniform(0, 2) ? -1 : 1);
      const double sy = rng.uniform(0.2, 2.0) * (rng.uniform(0, 2) ? -1 : 1);
      c.M = cv::Matx23d(sx, 0, rng.uniform(-0.5, 1.5) * dw, 0, sy, rng.uniform(-0.5, 1.5) * dh);
      c.what = "flip";
      break;
    }
    case 4: {  // huge and tiny scales
      const double mags[] = {1e3, 1e-3, 2e2, 5e-3, 1e-4};
      const double sx = mags[rng.uniform(0, 5)], sy = mags[rng.uniform(0, 5)];
      c.M = cv::Matx23d(sx, 0, rng.uniform(-1.0, 1.0) * dw, 0, sy, rng.uniform(-1.0, 1.0) * dh);
      c.what = "huge/tiny";
      break;
    }
    default: {  // scale 1 with random sub-pixel translation
      c.M = cv::Matx23d(1, 0, rng.uniform(-30.0, 30.0), 0, 1, rng.uniform(-30.0, 30.0));
      c.what = "unit scale";
      break;
    }
  }
  return c;
}

cv::Mat reference(const Case& c) {
  cv::Mat ref;
  cv::warpAffine(c.src, ref, c.M, c.dsize, cv::INTER_LINEAR, cv::BORDER_CONSTANT, cv::Scalar::all(c.border));
  return ref;
}

bool equal(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

std::string describe(const Case& c) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: src %dx%d, dst %dx%d, M = [%.17g 0 %.17g; 0 %.17g %.17g], border %d",
                c.what.c_str(), c.src.cols, c.src.rows, c.dsize.width, c.dsize.height, c.M(0, 0), c.M(0, 2),
                c.M(1, 1), c.M(1, 2), c.border);
  return buf;
}

std::vector<Path> paths() {
  std::vector<Path> p = {Path::Scalar};
  if (kernels::cpu::cpu_has_avx2()) p.push_back(Path::Avx2);
  return p;
}

/// Every (fx, fy) of the 32x32 table: scale 1 and translation -(k + i/32) gives fraction i exactly.
std::vector<Case> fraction_cases(cv::RNG& rng) {
  std::vector<Case> cases;
  for (int fy = 0; fy < 32; ++fy)
    for (int fx = 0; fx < 32; ++fx) {
      Case c;
      c.src = random_source(rng, rng.uniform(3, 30), rng.uniform(3, 40), fx % 5 == 0);
      c.dsize = cv::Size(rng.uniform(1, 45), rng.uniform(1, 35));
      c.M = cv::Matx23d(1, 0, -(rng.uniform(-3, 4) + fx / 32.0), 0, 1, -(rng.uniform(-3, 4) + fy / 32.0));
      c.border = fx == fy ? rng.uniform(0, 256) : 114;
      c.what = "fraction " + std::to_string(fx) + "," + std::to_string(fy);
      cases.push_back(c);
    }
  return cases;
}

TEST(Warp, SelfCheckPasses) {
  EXPECT_TRUE(io::warp_self_check_passed());
  const auto& info = io::warp_detail::self_check_info();
  std::printf("self-check: ok %d, %d comparisons, %.2f ms, avx2 %d\n", info.ok, info.cases, info.ms,
              kernels::cpu::cpu_has_avx2());
  EXPECT_GE(info.cases, 10);
}

TEST(Warp, RandomCasesBitwiseEqualOpenCV) {
  cv::RNG rng(12345);
  int checked = 0, failures = 0;
  for (int i = 0; i < 2400; ++i) {
    const Case c = random_case(rng, i);
    const cv::Mat ref = reference(c);
    for (Path p : paths()) {
      cv::Mat ours;
      ASSERT_TRUE(io::warp_detail::warp_unchecked(c.src, ours, c.M, c.dsize, static_cast<uint8_t>(c.border), p))
          << describe(c);
      ++checked;
      if (!equal(ours, ref) && failures++ < 5)
        ADD_FAILURE() << (p == Path::Avx2 ? "AVX2 " : "scalar ") << describe(c);
    }
    cv::Mat pub;  // the public entry point (self-check guard; refuses without AVX2)
    const bool pub_ok = io::warp_affine_axis_aligned(c.src, pub, c.M, c.dsize, static_cast<uint8_t>(c.border));
    ASSERT_EQ(pub_ok, kernels::cpu::cpu_has_avx2()) << describe(c);
    if (pub_ok && !equal(pub, ref) && failures++ < 5) ADD_FAILURE() << "public " << describe(c);
  }
  EXPECT_EQ(failures, 0);
  std::printf("%d kernel comparisons\n", checked);
}

TEST(Warp, EveryFractionBitwiseEqualOpenCV) {
  cv::RNG rng(777);
  int failures = 0;
  for (const Case& c : fraction_cases(rng)) {
    const cv::Mat ref = reference(c);
    for (Path p : paths()) {
      cv::Mat ours;
      ASSERT_TRUE(io::warp_detail::warp_unchecked(c.src, ours, c.M, c.dsize, static_cast<uint8_t>(c.border), p));
      if (!equal(ours, ref) && failures++ < 5) ADD_FAILURE() << describe(c);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Warp, LoaderSizedCanvas) {
  // The loader's shape: a 1280x1280 canvas to 640x640, scales across the hyp range and both ends.
  cv::RNG rng(99);
  cv::Mat canvas(1280, 1280, CV_8UC3);
  rng.fill(canvas, cv::RNG::UNIFORM, 0, 256);
  cv::GaussianBlur(canvas, canvas, cv::Size(0, 0), 2.0);
  for (double s : {0.1, 0.3, 0.5, 1.0, 1.37, 1.7, 1.9}) {
    io::PerspectiveParams p;
    p.scale = s;
    p.tx_frac = rng.uniform(0.4, 0.6);
    p.ty_frac = rng.uniform(0.4, 0.6);
    const cv::Matx33d M3 = io::perspective_matrix(p, 1280, 1280, 640, 640);
    Case c{canvas, cv::Matx23d(M3(0, 0), M3(0, 1), M3(0, 2), M3(1, 0), M3(1, 1), M3(1, 2)), cv::Size(640, 640), 114,
           "canvas"};
    const cv::Mat ref = reference(c);
    for (Path p2 : paths()) {
      cv::Mat ours;
      ASSERT_TRUE(io::warp_detail::warp_unchecked(c.src, ours, c.M, c.dsize, 114, p2));
      EXPECT_TRUE(equal(ours, ref)) << describe(c);
    }
  }
}

TEST(Warp, ReusesPreallocatedDstAndHandlesAliasing) {
  cv::RNG rng(5);
  cv::Mat src(50, 60, CV_8UC3);
  rng.fill(src, cv::RNG::UNIFORM, 0, 256);
  const cv::Matx23d M(0.7, 0, 3.3, 0, 0.9, -2.1);
  Case c{src, M, cv::Size(40, 30), 114, "reuse"};
  const cv::Mat ref = reference(c);
  cv::Mat dst(30, 40, CV_8UC3, cv::Scalar::all(1));
  const uint8_t* before = dst.data;
  ASSERT_TRUE(io::warp_detail::warp_unchecked(src, dst, M, cv::Size(40, 30), 114, Path::Auto));
  EXPECT_EQ(dst.data, before);
  EXPECT_TRUE(equal(dst, ref));
  // dst is the same object as src (in-place call), and a dst view inside src
  Case c2{src.clone(), M, src.size(), 114, "alias"};
  const cv::Mat ref2 = reference(c2);
  cv::Mat img = c2.src.clone();
  ASSERT_TRUE(io::warp_detail::warp_unchecked(img, img, M, cv::Size(), 114, Path::Auto));  // empty dsize: src size
  EXPECT_TRUE(equal(img, ref2));
}

TEST(Warp, RefusesOtherInputsWithoutTouchingDst) {
  cv::Mat src(20, 30, CV_8UC3, cv::Scalar(1, 2, 3));
  cv::Mat dst(7, 9, CV_8UC3, cv::Scalar(9, 9, 9));
  const uint8_t* before = dst.data;
  auto untouched = [&] {
    return dst.data == before && dst.rows == 7 && dst.cols == 9 && cv::countNonZero(dst.reshape(1) != 9) == 0;
  };
  const cv::Size ds(11, 13);
  const double nan = std::nan("");
  const cv::Matx23d rot = cv::getRotationMatrix2D(cv::Point2f(10, 10), 30, 1.0);
  for (const cv::Matx23d& M : {rot, cv::Matx23d(1, 0.1, 0, 0, 1, 0), cv::Matx23d(1, 0, 0, 1e-9, 1, 0),
                               cv::Matx23d(0, 0, 0, 0, 1, 0), cv::Matx23d(1, 0, 0, 0, 0, 0),
                               cv::Matx23d(1, 0, nan, 0, 1, 0), cv::Matx23d(1e-300, 0, 0, 0, 1e-300, 0)}) {
    EXPECT_FALSE(io::warp_affine_axis_aligned(src, dst, M, ds, 114));
    EXPECT_TRUE(untouched());
  }
  const cv::Matx23d ok(1.5, 0, 1, 0, 1.5, 2);
  cv::Mat gray(20, 30, CV_8UC1, cv::Scalar(5)), f32(20, 30, CV_32FC3, cv::Scalar::all(0.5)), empty;
  for (const cv::Mat* s : {&gray, &f32, &empty}) {
    EXPECT_FALSE(io::warp_affine_axis_aligned(*s, dst, ok, ds, 114));
    EXPECT_TRUE(untouched());
  }
  // the same call with a supported input
  EXPECT_EQ(io::warp_affine_axis_aligned(src, dst, ok, ds, 114), kernels::cpu::cpu_has_avx2());
  EXPECT_TRUE(io::warp_detail::warp_unchecked(src, dst, ok, ds, 114, Path::Scalar));
}

TEST(Warp, WrongRoundingConstantIsDetected) {
  // The test must be able to fail: the kernel with the rounding constant off by one (511 or 513
  // instead of 512) has to disagree with OpenCV somewhere in the random cases, on every path.
  for (int bias : {511, 513}) {
    for (Path p : paths()) {
      cv::RNG rng(12345);
      int mismatches = 0;
      for (int i = 0; i < 300 && mismatches == 0; ++i) {
        const Case c = random_case(rng, i);
        cv::Mat ours;
        ASSERT_TRUE(io::warp_detail::warp_unchecked(c.src, ours, c.M, c.dsize, static_cast<uint8_t>(c.border), p,
                                                    bias));
        mismatches += !equal(ours, reference(c));
      }
      EXPECT_GT(mismatches, 0) << "bias " << bias << (p == Path::Avx2 ? " AVX2" : " scalar");
    }
  }
}

}  // namespace
