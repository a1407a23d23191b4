// CPU pixel kernels of the fused training-sample finish: official augment_hsv (OpenCV's uint8
// BGR->HSV, three LUTs, HSV->BGR), np.flipud, np.fliplr and the HWC->CHW (RGB planes) collate in
// one pass, on raw interleaved BGR bytes (scalar, AVX2+FMA and AVX-512 F/BW/VL/VBMI variants).
// No OpenCV here: io/color.h wraps them for cv::Mat and verifies them against cv::cvtColor.
#pragma once

#include <cstdint>

namespace kernels::cpu {

/// Per-pixel finishing ops of one training sample, in the official order (augment_hsv, flipud,
/// fliplr; utils/dataloaders.py LoadImagesAndLabels.__getitem__ of WongKinYiu/yolov9).
/// gh, gs, gv are the hue / saturation / value gains of utils/augmentations.py augment_hsv.
/// (io::PixelOps is this type.)
struct PixelOps {
  bool hsv = false;
  double gh = 1, gs = 1, gv = 1;
  bool flipud = false, fliplr = false;
};

// ---------------------------------------------------------------------------------------------
// The model of OpenCV's uint8 HSV conversions
//
// BGR2HSV (RGB2HSV_b, hrange 180) is integer math, identical in OpenCV's SIMD loop and scalar
// tail. HSV2BGR (HSV2RGB_b) is float math whose last steps differ by position in the row:
// OpenCV's SIMD loop handles blocks of `simd_block` pixels (4 float vectors: 32 px for its AVX2
// dispatch) and converts x*255 by TRUNCATION, with tab2 = v*(1 - s*f) and tab3 = v*(1 - s*(1-f))
// contracted to FMAs by the compiler; the scalar tail of each row (the last W % simd_block px)
// ROUNDS (saturate_cast = cvRound) and contracts only tab2. Measured on the linked 4.6 build;
// the verification in io/color.cpp finds the block width and checks these rules over the whole
// domain (source: OpenCV 4.6 modules/imgproc/src/color_hsv.simd.hpp).

/// How HSV2RGB_b turns one pixel's float result into bytes.
struct HsvRule {
  bool trunc;  ///< x*255 -> int by truncation (else round half to even)
  bool fma2;   ///< tab2 = v * fma(-s, f, 1)
  bool fma3;   ///< tab3 = v * fma(-s, 1 - f, 1)
};

/// OpenCV's HSV2BGR by row position: pixels [0, nsimd(W)) of a W-pixel row follow `simd`, the
/// rest `tail`. The defaults are those measured on OpenCV 4.6's AVX2 dispatch.
struct HsvModel {
  int simd_block = 32;  ///< SIMD block width in pixels (0: no SIMD path, every pixel is tail)
  HsvRule simd{true, true, true};
  HsvRule tail{false, true, false};
  /// Pixels of a w-pixel row that OpenCV converts in its SIMD loop.
  int64_t nsimd(int64_t w) const { return simd_block > 0 ? w / simd_block * simd_block : 0; }
};

/// Kernel variants. Every variant gives the same bytes for the same HsvModel.
enum class ColorKernel {
  Scalar,  ///< portable (x86-64 baseline and any other CPU)
  Avx2,    ///< AVX2 + FMA, 16 px a step (gathers for the tables)
  Avx512,  ///< AVX-512 F/BW/VL/VBMI, 64 px a step (byte-permute table lookups, no gathers)
};

/// True when this CPU runs ColorKernel::Avx2 (AVX2 and FMA).
bool cpu_has_avx2_fma();

/// True when this CPU runs ColorKernel::Avx512 (avx512f, avx512bw, avx512vl, avx512vbmi).
bool cpu_has_avx512vbmi();

/// The fastest variant this CPU runs: Avx512, else Avx2, else Scalar.
ColorKernel best_color_kernel();

/// Fused finish of one image. `bgr`: `rows` x `cols` interleaved uint8 BGR pixels, row y starting
/// at bgr + y * row_step (bytes, >= 3 * cols). Writes three rows*cols uint8 planes dst_r, dst_g,
/// dst_b (RGB order, row-major, contiguous, not aliasing `bgr`) after applying `ops`: official
/// augment_hsv when ops.hsv (LUTs over 0..255: hue = uint8(fmod(x*gh, 180)), sat =
/// uint8(clip(x*gs, 0, 255)), val = uint8(clip(x*gv, 0, 255)), as io::apply_hsv; the HSV
/// conversions follow `model`), then np.flipud, then np.fliplr. With the verified model the
/// result is bitwise equal to io::apply_hsv + cv::flip + cv::split. Single-threaded.
/// Throws engine::ShapeError for rows or cols < 1 or row_step < 3 * cols, engine::Error for a null
/// pointer or a variant this CPU cannot run.
/// Source: utils/augmentations.py augment_hsv and utils/dataloaders.py of WongKinYiu/yolov9;
/// OpenCV 4.6 color_hsv.simd.hpp RGB2HSV_b / HSV2RGB_b.
void finish_to_planes_u8(const uint8_t* bgr, int64_t rows, int64_t cols, int64_t row_step, const PixelOps& ops,
                         const HsvModel& model, ColorKernel kernel, uint8_t* dst_r, uint8_t* dst_g, uint8_t* dst_b);

/// cv::cvtColor(COLOR_BGR2HSV) on `n` interleaved uint8 pixels (src, dst: 3 * n bytes, not
/// overlapping): H in 0..179, S and V in 0..255, OpenCV 4.6 RGB2HSV_b integer
/// math (the same code as the fused kernel). For the exhaustive verification in io/color.cpp.
/// Throws engine::Error for a null pointer (n > 0) or a variant this CPU cannot run.
void bgr2hsv_u8(const uint8_t* src, uint8_t* dst, int64_t n, ColorKernel kernel);

/// cv::cvtColor(COLOR_HSV2BGR) on `n` interleaved uint8 pixels (H 0..179, S, V 0..255; src, dst:
/// 3 * n bytes, not overlapping), every pixel with `rule` (OpenCV 4.6 HSV2RGB_b; the
/// fused kernel's code). For the exhaustive verification in io/color.cpp. Throws engine::Error for
/// a null pointer (n > 0) or a variant this CPU cannot run.
void hsv2bgr_u8(const uint8_t* src, uint8_t* dst, int64_t n, const HsvRule& rule, ColorKernel kernel);

}  // namespace kernels::cpu
