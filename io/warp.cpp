// io::warp_affine_axis_aligned: cv::warpAffine(INTER_LINEAR, BORDER_CONSTANT) for CV_8UC3 and
// scale + translation matrices, bitwise equal to OpenCV 4.6: the cv::Mat entry of the kernel in
// kernels/cpu/warp.cpp (which explains the model of OpenCV), guarded by a one-time self-check
// against cv::warpAffine.
#include "io/warp.h"

#include <opencv2/imgproc.hpp>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "kernels/cpu/warp.h"

namespace io {
namespace warp_detail {
namespace {

bool overlaps(const cv::Mat& a, const cv::Mat& b) {
  return a.datastart && b.datastart && a.datastart < b.dataend && b.datastart < a.dataend;
}

// ---------------------------------------------------------------------------------------------
// Self-check

SelfCheckInfo run_self_check() {
  const auto t0 = std::chrono::steady_clock::now();
  SelfCheckInfo info;
  info.ok = true;
  cv::RNG rng(0x77617270);  // fixed: the check is reproducible
  struct Case {
    int sh, sw, dh, dw;
    double s, tx, ty;  // forward map x' = s * x + tx (negative s: flip)
    int border;
  };
  const Case cases[] = {
      {97, 131, 64, 80, 0.15, 20.3, 11.7, 114},   // small scale, large border area
      {97, 131, 71, 53, 1.0, -13, 7, 114},         // scale exactly 1, integer translation
      {97, 131, 71, 53, 1.0, -13.4, 7.71875, 0},   // scale 1, fractional translation
      {60, 70, 45, 39, 1.7, -20.1, -9.3, 255},     // upscale, odd output size
      {60, 70, 49, 61, -0.8, 55.2, 3.3, 114},      // horizontal flip
      {23, 29, 41, 37, 1.31, 2.2, -1.9, 114},      // source smaller than 32x32, edge rows/cols
      {1, 1, 5, 7, 2.5, 1.1, 0.7, 114},            // 1x1 source
      {3, 2, 9, 8, 1.9, -0.4, 0.6, 17},            // tiny source
      {128, 128, 64, 64, 0.5, 0.0, 0.0, 114},      // loader-like: half-size canvas
      {40, 90, 33, 100, 0.37, 61.5, -3.2, 114},    // translation pushing the image partly out
  };
  const bool avx2 = kernels::cpu::cpu_has_avx2();
  for (const Case& c : cases) {
    cv::Mat src(c.sh, c.sw, CV_8UC3);
    rng.fill(src, cv::RNG::UNIFORM, 0, 256);
    const cv::Matx23d M(c.s, 0, c.tx, 0, std::abs(c.s), c.ty);
    const cv::Size dsize(c.dw, c.dh);
    cv::Mat ref;
    cv::warpAffine(src, ref, M, dsize, cv::INTER_LINEAR, cv::BORDER_CONSTANT, cv::Scalar::all(c.border));
    for (Path p : {Path::Scalar, Path::Avx2}) {
      if (p == Path::Avx2 && !avx2) continue;
      cv::Mat ours;
      const bool done = warp_unchecked(src, ours, M, dsize, static_cast<uint8_t>(c.border), p);
      ++info.cases;
      if (!done || ours.size() != ref.size() || cv::norm(ours, ref, cv::NORM_INF) != 0) {
        std::fprintf(stderr,
                     "warning: io::warp_affine_axis_aligned: self-check mismatch against cv::warpAffine (%s kernel, "
                     "src %dx%d, dst %dx%d, scale %g); using cv::warpAffine\n",
                     p == Path::Avx2 ? "AVX2" : "scalar", c.sw, c.sh, c.dw, c.dh, c.s);
        info.ok = false;
        break;
      }
    }
    if (!info.ok) break;
  }
  info.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return info;
}

}  // namespace

bool warp_unchecked(const cv::Mat& src, cv::Mat& dst, const cv::Matx23d& M, cv::Size dsize, uint8_t border,
                    Path path, int round_bias) {
  if (src.empty() || src.dims != 2 || src.type() != CV_8UC3) return false;
  if (src.cols > SHRT_MAX || src.rows > SHRT_MAX) return false;
  if (dsize.empty()) dsize = src.size();
  if (path == Path::Avx2 && !kernels::cpu::cpu_has_avx2()) return false;
  double Mi[6];
  if (!kernels::cpu::invert_affine_axis_aligned(M.val, Mi)) return false;
  const bool avx2 = path == Path::Avx2 || (path == Path::Auto && kernels::cpu::cpu_has_avx2());

  cv::Mat s = src;  // holds src alive if dst is the same object and gets reallocated
  dst.create(dsize, CV_8UC3);
  if (overlaps(s, dst)) s = s.clone();
  kernels::cpu::warp_affine_axis_aligned_u8c3(s.data, s.rows, s.cols, static_cast<int64_t>(s.step[0]), dst.data,
                                              dst.rows, dst.cols, static_cast<int64_t>(dst.step[0]), Mi, border,
                                              avx2 ? kernels::cpu::WarpKernel::Avx2 : kernels::cpu::WarpKernel::Scalar,
                                              round_bias);
  return true;
}

const SelfCheckInfo& self_check_info() {
  static std::once_flag once;
  static SelfCheckInfo info;
  std::call_once(once, [] { info = run_self_check(); });
  return info;
}

}  // namespace warp_detail

bool warp_self_check_passed() { return warp_detail::self_check_info().ok; }

bool warp_affine_axis_aligned(const cv::Mat& src, cv::Mat& dst, const cv::Matx23d& M, cv::Size dsize,
                              uint8_t border) {
  // Without AVX2 the portable kernel is slower than OpenCV's SSE2 remap (bench/warp_bench.cpp:
  // about 2.6 ms against 1.8 ms at 640x640), so the caller's cv::warpAffine is the better path.
  if (!kernels::cpu::cpu_has_avx2() || !warp_self_check_passed()) return false;
  return warp_detail::warp_unchecked(src, dst, M, dsize, border, warp_detail::Path::Avx2);
}

}  // namespace io
