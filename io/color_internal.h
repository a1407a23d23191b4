// Internal hooks of io/color.cpp for tests and benchmarks: choose the kernel variant of
// finish_to_planes explicitly and read what the one-time verification found. Not public API.
#pragma once

#include <cstdint>
#include <string>

#include "io/color.h"

namespace io::color_detail {

enum class Path {
  Auto,       ///< what finish_to_planes uses: AVX2 or scalar if verified, else Reference
  Reference,  ///< cv::cvtColor + cv::LUT + cv::cvtColor (io::apply_hsv) + cv::flip + cv::split
  Scalar,     ///< portable fast kernel (x86-64 baseline), even if unverified
  Avx2,       ///< AVX2+FMA fast kernel, even if unverified; throws engine::Error without AVX2
};

/// finish_to_planes with an explicit kernel choice (same contract and errors).
void finish_to_planes(const cv::Mat& bgr, const PixelOps& ops, uint8_t* dst_r, uint8_t* dst_g, uint8_t* dst_b,
                      Path path);

/// Outcome of the one-time verification (runs it if it has not run yet).
struct VerifyInfo {
  bool scalar_ok = false;    ///< scalar kernel equals cvtColor on the whole domain
  bool avx2_ok = false;      ///< AVX2 kernel equals cvtColor on the whole domain (false without AVX2)
  bool avx2_cpu = false;     ///< this CPU has AVX2 and FMA
  int simd_block = 0;        ///< OpenCV HSV2BGR SIMD block width in pixels (0: no SIMD path)
  std::string simd_rule;     ///< conversion rule found for pixels in OpenCV's SIMD blocks
  std::string tail_rule;     ///< conversion rule found for the pixels of a row's tail
  double seconds = 0;        ///< wall time of the verification
  std::string message;       ///< first mismatch, empty when everything matched
};
const VerifyInfo& verify_info();

/// True when the AVX2 variant can run on this CPU.
bool cpu_has_avx2();

}  // namespace io::color_detail
