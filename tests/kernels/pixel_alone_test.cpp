// The CPU pixel kernels (kernels/cpu/color.h, kernels/cpu/warp.h) on their raw-pointer interface,
// linked with the kernels layer alone (no io, no OpenCV): every variant against the scalar one,
// exact byte moves without HSV, known HSV values, identity and integer-shift warps, argument errors.
// Bitwise equality with OpenCV itself is tested in tests/io/color_test.cpp and tests/io/warp_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "engine/error.h"
#include "kernels/cpu/color.h"
#include "kernels/cpu/warp.h"

namespace {

using kernels::cpu::ColorKernel;
using kernels::cpu::WarpKernel;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng() >> 24);
  return v;
}

std::vector<ColorKernel> color_kernels() {
  std::vector<ColorKernel> k{ColorKernel::Scalar};
  if (kernels::cpu::cpu_has_avx2_fma()) k.push_back(ColorKernel::Avx2);
  if (kernels::cpu::cpu_has_avx512vbmi()) k.push_back(ColorKernel::Avx512);
  return k;
}

/// R, G, B planes (3 * rows * cols bytes) of `img` (rows x cols BGR, row step `step` bytes).
std::vector<uint8_t> finish(const std::vector<uint8_t>& img, int64_t rows, int64_t cols, int64_t step,
                            const kernels::cpu::PixelOps& ops, const kernels::cpu::HsvModel& model, ColorKernel k) {
  const int64_t n = rows * cols;
  std::vector<uint8_t> out(3 * static_cast<size_t>(n), 0xCD);
  kernels::cpu::finish_to_planes_u8(img.data(), rows, cols, step, ops, model, k, out.data(), out.data() + n,
                                    out.data() + 2 * n);
  return out;
}

TEST(ColorKernels, BestKernelMatchesCpuFeatures) {
  const ColorKernel best = kernels::cpu::best_color_kernel();
  EXPECT_EQ(best, color_kernels().back());
}

TEST(ColorKernels, WithoutHsvOnlyBytesMove) {
  // Deinterleave + flips are exact byte moves: check them directly for every variant.
  for (int64_t cols : {1, 15, 16, 17, 63, 64, 65, 130}) {
    const int64_t rows = 5, step = 3 * cols + 7;
    const std::vector<uint8_t> img = random_bytes(static_cast<size_t>(rows * step), static_cast<uint32_t>(cols));
    for (int flips = 0; flips < 4; ++flips) {
      kernels::cpu::PixelOps ops;
      ops.flipud = flips & 1, ops.fliplr = flips & 2;
      for (ColorKernel k : color_kernels()) {
        const std::vector<uint8_t> got = finish(img, rows, cols, step, ops, {}, k);
        for (int64_t y = 0; y < rows; ++y)
          for (int64_t x = 0; x < cols; ++x) {
            const int64_t oy = ops.flipud ? rows - 1 - y : y, ox = ops.fliplr ? cols - 1 - x : x;
            for (int c = 0; c < 3; ++c)  // plane c is R, G, B: source byte 2 - c
              ASSERT_EQ(got[c * rows * cols + oy * cols + ox], img[y * step + 3 * x + 2 - c])
                  << "cols " << cols << " flips " << flips << " kernel " << static_cast<int>(k);
          }
      }
    }
  }
}

TEST(ColorKernels, EveryVariantEqualsScalar) {
  // Row widths around the 16- and 64-pixel steps and the model's block boundary (32, 24, none).
  kernels::cpu::HsvModel odd_block;
  odd_block.simd_block = 24;
  kernels::cpu::HsvModel no_simd;
  no_simd.simd_block = 0;
  const kernels::cpu::HsvModel models[] = {{}, odd_block, no_simd};
  for (const kernels::cpu::HsvModel& model : models)
    for (int64_t cols = 1; cols <= 130; cols += (cols < 70 ? 1 : 7)) {
      const int64_t rows = 3, step = 3 * cols + 5;
      const std::vector<uint8_t> img = random_bytes(static_cast<size_t>(rows * step), static_cast<uint32_t>(cols));
      for (int flips = 0; flips < 4; ++flips) {
        kernels::cpu::PixelOps ops;
        ops.hsv = true, ops.gh = 1.007, ops.gs = 0.55, ops.gv = 1.21;
        ops.flipud = flips & 1, ops.fliplr = flips & 2;
        const std::vector<uint8_t> want = finish(img, rows, cols, step, ops, model, ColorKernel::Scalar);
        for (ColorKernel k : color_kernels())
          ASSERT_TRUE(finish(img, rows, cols, step, ops, model, k) == want)
              << "cols " << cols << " block " << model.simd_block << " flips " << flips << " kernel "
              << static_cast<int>(k);
      }
    }
}

TEST(ColorKernels, StageKernelsKnownValuesAndAgreement) {
  // OpenCV's uint8 HSV (hrange 180): red, green, blue, grey (HSV2BGR: the primaries, exact).
  const uint8_t bgr[] = {0, 0, 255, 0, 255, 0, 255, 0, 0, 128, 128, 128};
  const uint8_t hsv[] = {0, 255, 255, 60, 255, 255, 120, 255, 255, 0, 0, 128};
  const kernels::cpu::HsvModel model;
  for (ColorKernel k : color_kernels()) {
    uint8_t out[12];
    kernels::cpu::bgr2hsv_u8(bgr, out, 4, k);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(out[i], hsv[i]) << "bgr2hsv byte " << i;
    for (const kernels::cpu::HsvRule& rule : {model.simd, model.tail}) {
      kernels::cpu::hsv2bgr_u8(hsv, out, 3, rule, k);
      for (int i = 0; i < 9; ++i) EXPECT_EQ(out[i], bgr[i]) << "hsv2bgr byte " << i;
    }
  }
  // A strided sample of both domains, every variant against the scalar one.
  const int64_t n = 100003;
  std::vector<uint8_t> in(3 * n), want(3 * n), got(3 * n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = i * 167;  // spreads over 2^24
    in[3 * i] = static_cast<uint8_t>(v), in[3 * i + 1] = static_cast<uint8_t>(v >> 8),
    in[3 * i + 2] = static_cast<uint8_t>(v >> 16);
  }
  kernels::cpu::bgr2hsv_u8(in.data(), want.data(), n, ColorKernel::Scalar);
  for (ColorKernel k : color_kernels()) {
    kernels::cpu::bgr2hsv_u8(in.data(), got.data(), n, k);
    EXPECT_TRUE(got == want) << "bgr2hsv kernel " << static_cast<int>(k);
  }
  std::vector<uint8_t> hsv_in = want;  // valid HSV values (H < 180)
  for (const kernels::cpu::HsvRule& rule : {model.simd, model.tail}) {
    kernels::cpu::hsv2bgr_u8(hsv_in.data(), want.data(), n, rule, ColorKernel::Scalar);
    for (ColorKernel k : color_kernels()) {
      kernels::cpu::hsv2bgr_u8(hsv_in.data(), got.data(), n, rule, k);
      EXPECT_TRUE(got == want) << "hsv2bgr kernel " << static_cast<int>(k) << " trunc " << rule.trunc;
    }
  }
}

TEST(ColorKernels, BadArgumentsThrow) {
  std::vector<uint8_t> img(3 * 16), out(3 * 16);
  uint8_t *r = out.data(), *g = r + 16, *b = g + 16;
  const kernels::cpu::PixelOps ops;
  const kernels::cpu::HsvModel m;
  using kernels::cpu::finish_to_planes_u8;
  EXPECT_THROW(finish_to_planes_u8(img.data(), 0, 4, 12, ops, m, ColorKernel::Scalar, r, g, b), engine::ShapeError);
  EXPECT_THROW(finish_to_planes_u8(img.data(), 4, 0, 12, ops, m, ColorKernel::Scalar, r, g, b), engine::ShapeError);
  EXPECT_THROW(finish_to_planes_u8(img.data(), 4, 4, 11, ops, m, ColorKernel::Scalar, r, g, b), engine::ShapeError);
  EXPECT_THROW(finish_to_planes_u8(nullptr, 4, 4, 12, ops, m, ColorKernel::Scalar, r, g, b), engine::Error);
  EXPECT_THROW(finish_to_planes_u8(img.data(), 4, 4, 12, ops, m, ColorKernel::Scalar, r, nullptr, b), engine::Error);
  EXPECT_THROW(kernels::cpu::bgr2hsv_u8(nullptr, out.data(), 4, ColorKernel::Scalar), engine::Error);
  EXPECT_THROW(kernels::cpu::hsv2bgr_u8(img.data(), nullptr, 4, m.simd, ColorKernel::Scalar), engine::Error);
  if (!kernels::cpu::cpu_has_avx512vbmi())
    EXPECT_THROW(finish_to_planes_u8(img.data(), 4, 4, 12, ops, m, ColorKernel::Avx512, r, g, b), engine::Error);
}

// ---------------------------------------------------------------------------------------------

std::vector<WarpKernel> warp_kernels() {
  std::vector<WarpKernel> k{WarpKernel::Scalar};
  if (kernels::cpu::cpu_has_avx2()) k.push_back(WarpKernel::Avx2);
  return k;
}

TEST(WarpKernels, InverseOfAxisAlignedMapsOnly) {
  double inv[6];
  const double ok[6] = {2, 0, 3, 0, 0.5, -1};  // x' = 2x + 3, y' = y / 2 - 1
  ASSERT_TRUE(kernels::cpu::invert_affine_axis_aligned(ok, inv));
  EXPECT_EQ(inv[0], 0.5);
  EXPECT_EQ(inv[1], 0);
  EXPECT_EQ(inv[2], -1.5);
  EXPECT_EQ(inv[3], 0);
  EXPECT_EQ(inv[4], 2);
  EXPECT_EQ(inv[5], 2);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double bad[][6] = {{1, 0.1, 0, 0, 1, 0},  {1, 0, 0, 1e-9, 1, 0},     {0, 0, 0, 0, 1, 0},
                           {1, 0, 0, 0, 0, 0},    {1, 0, nan, 0, 1, 0},      {1e-300, 0, 0, 0, 1e-300, 0}};
  for (const auto& m : bad) EXPECT_FALSE(kernels::cpu::invert_affine_axis_aligned(m, inv));
}

/// Warps `src` (h x w BGR, step 3 * w + 4) by the forward map `fwd` into dh x dw.
std::vector<uint8_t> warp(const std::vector<uint8_t>& src, int h, int w, const double fwd[6], int dh, int dw,
                          WarpKernel k, uint8_t border = 114) {
  double inv[6];
  EXPECT_TRUE(kernels::cpu::invert_affine_axis_aligned(fwd, inv));
  std::vector<uint8_t> dst(static_cast<size_t>(dh) * 3 * dw, 0xCD);
  kernels::cpu::warp_affine_axis_aligned_u8c3(src.data(), h, w, 3 * w + 4, dst.data(), dh, dw, 3 * dw, inv, border, k);
  return dst;
}

TEST(WarpKernels, IdentityAndIntegerShiftCopyPixels) {
  const int h = 37, w = 53, step = 3 * w + 4;
  const std::vector<uint8_t> src = random_bytes(static_cast<size_t>(h) * step, 7);
  const double identity[6] = {1, 0, 0, 0, 1, 0}, shift[6] = {1, 0, 5, 0, 1, -3};
  for (WarpKernel k : warp_kernels()) {
    const std::vector<uint8_t> same = warp(src, h, w, identity, h, w, k);
    const std::vector<uint8_t> moved = warp(src, h, w, shift, h, w, k, 9);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < 3 * w; ++x) {
        ASSERT_EQ(same[y * 3 * w + x], src[y * step + x]) << "identity y " << y << " byte " << x;
        const int sy = y + 3, sx = x - 15;  // dst (x, y) = src (x - 5, y + 3)
        const uint8_t want = sy < h && sx >= 0 ? src[sy * step + sx] : 9;
        ASSERT_EQ(moved[y * 3 * w + x], want) << "shift y " << y << " byte " << x;
      }
  }
}

TEST(WarpKernels, Avx2EqualsScalar) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 200; ++i) {
    const int h = 1 + static_cast<int>(rng() % 90), w = 1 + static_cast<int>(rng() % 90);
    const int dh = 1 + static_cast<int>(rng() % 80), dw = 1 + static_cast<int>(rng() % 80);
    const std::vector<uint8_t> src = random_bytes(static_cast<size_t>(h) * (3 * w + 4), static_cast<uint32_t>(i));
    const double sx = (0.1 + 2 * u(rng)) * (i % 5 == 0 ? -1 : 1), sy = 0.1 + 2 * u(rng);
    const double fwd[6] = {sx, 0, (u(rng) - 0.3) * dw, 0, sy, (u(rng) - 0.3) * dh};
    const std::vector<uint8_t> want = warp(src, h, w, fwd, dh, dw, WarpKernel::Scalar);
    for (WarpKernel k : warp_kernels()) ASSERT_TRUE(warp(src, h, w, fwd, dh, dw, k) == want) << "case " << i;
  }
}

TEST(WarpKernels, BadArgumentsThrow) {
  std::vector<uint8_t> buf(3 * 64 * 64);
  uint8_t* src = buf.data();
  uint8_t* dst = buf.data() + 3 * 32 * 64;
  const double inv[6] = {1, 0, 0, 0, 1, 0}, rot[6] = {1, 0.5, 0, 0, 1, 0};
  using kernels::cpu::warp_affine_axis_aligned_u8c3;
  const auto S = WarpKernel::Scalar;
  EXPECT_THROW(warp_affine_axis_aligned_u8c3(src, 0, 8, 24, dst, 8, 8, 24, inv, 0, S), engine::ShapeError);
  EXPECT_THROW(warp_affine_axis_aligned_u8c3(src, 8, 40000, 120000, dst, 8, 8, 24, inv, 0, S), engine::ShapeError);
  EXPECT_THROW(warp_affine_axis_aligned_u8c3(src, 8, 8, 23, dst, 8, 8, 24, inv, 0, S), engine::ShapeError);
  EXPECT_THROW(warp_affine_axis_aligned_u8c3(src, 8, 8, 24, dst, 8, 0, 24, inv, 0, S), engine::ShapeError);
  EXPECT_THROW(warp_affine_axis_aligned_u8c3(nullptr, 8, 8, 24, dst, 8, 8, 24, inv, 0, S), engine::Error);
  EXPECT_THROW(warp_affine_axis_aligned_u8c3(src, 8, 8, 24, dst, 8, 8, 24, rot, 0, S), engine::Error);
  EXPECT_THROW(warp_affine_axis_aligned_u8c3(src, 8, 8, 24, src + 12, 8, 8, 24, inv, 0, S), engine::Error);
  EXPECT_NO_THROW(warp_affine_axis_aligned_u8c3(src, 8, 8, 24, dst, 8, 8, 24, inv, 0, S));
  if (!kernels::cpu::cpu_has_avx2())
    EXPECT_THROW(warp_affine_axis_aligned_u8c3(src, 8, 8, 24, dst, 8, 8, 24, inv, 0, WarpKernel::Avx2), engine::Error);
}

}  // namespace
