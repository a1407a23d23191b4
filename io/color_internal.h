// Internal hooks of io/color.cpp for tests and benchmarks: choose the kernel variant of
// finish_to_planes explicitly and read what the one-time verification found. Not public API.
// The CPU feature queries of the variants are kernels::cpu::cpu_has_* (kernels/cpu/color.h).
#pragma once

#include <cstdint>
#include <string>

#include "io/color.h"

namespace io::color_detail {

enum class Path {
  Auto,       ///< what finish_to_planes uses: AVX-512 VBMI, else AVX2, if verified; else Reference
  Reference,  ///< cv::cvtColor + cv::LUT + cv::cvtColor (io::apply_hsv) + cv::flip + cv::split
  Scalar,     ///< kernels::cpu::ColorKernel::Scalar (x86-64 baseline), even if unverified
  Avx2,       ///< ColorKernel::Avx2 (AVX2+FMA), even if unverified; throws engine::Error without AVX2
  Avx512,     ///< ColorKernel::Avx512 (F/BW/VL/VBMI), even if unverified; throws engine::Error without them
};

/// finish_to_planes with an explicit kernel choice (same contract and errors).
void finish_to_planes(const cv::Mat& bgr, const PixelOps& ops, uint8_t* dst_r, uint8_t* dst_g, uint8_t* dst_b,
                      Path path);

/// Outcome of an exhaustive verification of one kernel variant against cv::cvtColor.
struct VerifyInfo {
  std::string variant;     ///< "avx512vbmi", "avx2" or "scalar"
  bool ok = false;         ///< the variant equals cvtColor on the whole domain
  bool avx2_cpu = false;   ///< this CPU has AVX2 and FMA
  int simd_block = 0;      ///< OpenCV HSV2BGR SIMD block width in pixels (0: no SIMD path)
  std::string simd_rule;   ///< conversion rule found for pixels in OpenCV's SIMD blocks
  std::string tail_rule;   ///< conversion rule found for the pixels of a row's tail
  double seconds = 0;      ///< wall time of the verification
  std::string steps;       ///< time of each step
  std::string message;     ///< first mismatch, empty when everything matched
};

/// The one-time verification behind io::fast_hsv_verified(): it checks the variant that
/// finish_to_planes dispatches to on this CPU (AVX-512 VBMI, else AVX2 when available, else scalar).
const VerifyInfo& verify_info();

/// Runs a fresh exhaustive verification of `variant` (Path::Scalar, Path::Avx2 or Path::Avx512),
/// e.g. for a variant this CPU does not dispatch to. Throws engine::Error for another Path or a
/// variant this CPU cannot run. Takes seconds for the scalar kernel.
VerifyInfo verify_now(Path variant);

/// The HSV2BGR rounding model the one-time verification found (running it, row tails included,
/// if it has not run yet): what the fast kernels follow, and what OpenCV does on this machine.
kernels::cpu::HsvModel verified_model();

}  // namespace io::color_detail
