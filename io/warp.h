// Fast, bitwise-exact replacement of cv::warpAffine(INTER_LINEAR, BORDER_CONSTANT) for CV_8UC3 images
// and scale + translation matrices (the training loader's random_perspective with degrees = shear =
// perspective = 0). Source x depends only on the output column and source y only on the output row,
// so coordinates and weights are tabulated once per column / row. The kernel lives in
// kernels/cpu/warp.{h,cpp} (which explains the model); this is its cv::Mat entry and self-check.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>

namespace io {

/// dst = cv::warpAffine(src, M, dsize, INTER_LINEAR, BORDER_CONSTANT, Scalar::all(border)), bitwise
/// equal to the linked OpenCV (4.6: WarpAffineInvoker + remapBilinear, 1/32-px fixed point), for
///  - src: H x W x 3 uint8 (CV_8UC3), 1 <= H, W <= 32767, any row step (ROI views are fine);
///  - M: forward 2x3 affine map (src px -> dst px) with M(0,1) == 0 and M(1,0) == 0 exactly (scale,
///    flip and translation), all entries finite and M(0,0) * M(1,1) != 0;
///  - dsize: output width x height in px (dsize.empty(): src.size(), as OpenCV).
/// `dst` is (re)allocated with dst.create (a buffer of the right size and type is reused, so callers
/// can keep one per thread); it must not share memory with src (it is then copied first).
/// Returns false, without touching dst, for anything else (other types, rotation/shear, singular or
/// non-finite M) so the caller can use cv::warpAffine. Also returns false on a CPU without AVX2 (the
/// portable kernel is slower than OpenCV there), and forever if the one-time self-check
/// (warp_self_check_passed) found a mismatch. About 0.23-0.35 ms for 1280x1280 -> 640x640 at
/// scales 0.3-1.7, 5-8x faster than single-threaded cv::warpAffine (bench/warp_bench.cpp). Single-threaded; never throws for bad input
/// (it refuses); deterministic (pure function of its inputs).
/// Source: OpenCV modules/imgproc/src/imgwarp.cpp cv::warpAffine / hal::warpAffineBlockline /
/// remapBilinear; used as cv2.warpAffine by utils/augmentations.py random_perspective of
/// WongKinYiu/yolov9.
bool warp_affine_axis_aligned(const cv::Mat& src, cv::Mat& dst, const cv::Matx23d& M, cv::Size dsize,
                              uint8_t border);

/// True when the one-time self-check passed: the kernel this CPU dispatches to (AVX2 or scalar) and
/// the scalar kernel were compared with cv::warpAffine on a fixed set of random images and matrices
/// (small scales with large border areas, scale exactly 1, flips, odd output sizes, sources smaller
/// than 32x32). Runs once (std::call_once, a few ms); on a mismatch prints one warning line to stderr.
bool warp_self_check_passed();

namespace warp_detail {

/// Kernel choice, for tests and benchmarks: Auto is kernels::cpu::WarpKernel::Avx2 where
/// kernels::cpu::cpu_has_avx2(), else Scalar; Scalar and Avx2 name the kernel variant.
enum class Path { Auto, Scalar, Avx2 };

/// Statistics of the self-check (for the test report and the benchmark).
struct SelfCheckInfo {
  bool ok = false;
  int cases = 0;
  double ms = 0;  ///< wall time of the self-check in milliseconds
};
const SelfCheckInfo& self_check_info();

/// The kernel without the self-check guard. `round_bias` is the fixed-point rounding constant added
/// before the final >> 10 (512 is exact; tests pass other values to prove they can fail). Returns
/// false for the inputs warp_affine_axis_aligned refuses, or for Path::Avx2 on a CPU without AVX2.
bool warp_unchecked(const cv::Mat& src, cv::Mat& dst, const cv::Matx23d& M, cv::Size dsize, uint8_t border,
                    Path path, int round_bias = 512);

}  // namespace warp_detail
}  // namespace io
