// CPU kernel of the exact axis-aligned warpAffine: cv::warpAffine(INTER_LINEAR, BORDER_CONSTANT)
// of OpenCV 4.6 for interleaved uint8 3-channel images and scale + translation matrices, on raw
// pointers (per-column / per-row tables, AVX2 kernel, scalar fallback). No OpenCV here:
// io/warp.h wraps it for cv::Mat and self-checks it against cv::warpAffine.
#pragma once

#include <cstdint>

namespace kernels::cpu {

/// Kernel variants of warp_affine_axis_aligned_u8c3 (both give the same bytes).
enum class WarpKernel {
  Scalar,  ///< portable
  Avx2,    ///< AVX2, 8 output pixels a step
};

/// True when this CPU runs WarpKernel::Avx2.
bool cpu_has_avx2();

/// cv::warpAffine's inversion of the forward 2x3 affine map `fwd` (row-major, src px -> dst px:
/// x' = fwd[0] x + fwd[1] y + fwd[2], y' = fwd[3] x + fwd[4] y + fwd[5]) into the dst -> src map
/// `inv`, in double with OpenCV's operation order (D = 1 / (M0*M4 - M1*M3), ...). Returns false,
/// with `inv` unspecified, unless the map is axis-aligned (fwd[1] == fwd[3] == 0 exactly: scale,
/// flip, translation), all entries of fwd and inv are finite and the determinant is not 0.
/// Never throws. Source: OpenCV 4.6 modules/imgproc/src/imgwarp.cpp cv::warpAffine.
bool invert_affine_axis_aligned(const double fwd[6], double inv[6]);

/// dst = cv::warpAffine(src, M, (dst_w, dst_h), INTER_LINEAR, BORDER_CONSTANT, Scalar::all(border))
/// bitwise (OpenCV 4.6: WarpAffineInvoker + remapBilinear, 1/32-px fixed point), where `inv` is
/// invert_affine_axis_aligned(M).
///  - src: src_h x src_w interleaved uint8 3-channel pixels, 1 <= src_h, src_w <= 32767, row y at
///    src + y * src_step (bytes, >= 3 * src_w);
///  - dst: dst_h x dst_w pixels (>= 1), row y at dst + y * dst_step (bytes, >= 3 * dst_w); every
///    byte of the dst_w * 3 bytes of each row is written; must not overlap src;
///  - inv: dst px -> src px map with inv[1] == inv[3] == 0 and finite entries;
///  - round_bias: the fixed-point rounding constant added before the final >> 10 (512 is
///    OpenCV's; tests pass other values to prove that they can fail).
/// Single-threaded; deterministic. Throws engine::ShapeError for sizes or steps out of range,
/// engine::Error for null or overlapping buffers, a non-axis-aligned or non-finite `inv`, or
/// WarpKernel::Avx2 on a CPU without AVX2.
/// Source: OpenCV 4.6 modules/imgproc/src/imgwarp.cpp cv::warpAffine / hal::warpAffineBlockline /
/// remapBilinear; used as cv2.warpAffine by utils/augmentations.py random_perspective of
/// WongKinYiu/yolov9.
void warp_affine_axis_aligned_u8c3(const uint8_t* src, int src_h, int src_w, int64_t src_step, uint8_t* dst,
                                   int dst_h, int dst_w, int64_t dst_step, const double inv[6], uint8_t border,
                                   WarpKernel kernel, int round_bias = 512);

}  // namespace kernels::cpu
