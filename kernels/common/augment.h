// Kernel entries of the batched image augmentation (issue 12, item 1): the mosaic composition fused
// into the random perspective/affine warp (bilinear, border 114), mixup, augment_hsv, flips and the
// conversion to the model input; and the validation letterbox (resize + pad 114). The per-pixel
// math is shared Y9_HD code that reproduces the OpenCV 4.6 routines the CPU path calls
// (cv::warpAffine / warpPerspective, cv::resize INTER_LINEAR, cv::cvtColor BGR<->HSV as modelled
// in kernels/cpu/warp.cpp and kernels/cpu/color.h), so the CPU twin (kernels/cpu/augment.cpp) and
// the CUDA kernels (kernels/cuda/augment.cu) compute the same bytes. Random parameters are drawn
// on the host (io::AugmentedDataset::plan) and passed as AugSample / LetterboxSample arrays.
// Official: utils/augmentations.py random_perspective, augment_hsv, mixup, letterbox and
// utils/dataloaders.py load_mosaic of WongKinYiu/yolov9 5b1ea9a (shared/spec/data.md 4, 7-11).
#pragma once
#include <math.h>

#include <cstdint>

#include "engine/backend.h"
#include "engine/half.h"
#include "engine/hd.h"
#include "kernels/common/rounding.h"

namespace kernels {

// ---------------------------------------------------------------------------------------------
// Parameters

/// One decoded (already resized) uint8 BGR tile, h x w x 3, row y at tiles + offset + y * step,
/// placed on the warp's source canvas with its canvas rectangle [ax, ax + aw) x [ay, ay + ah) and
/// canvas = tile shifted by (padw, padh): canvas(cx, cy) = tile(cx - padw, cy - padh) inside the
/// rectangle (official load_mosaic: img4[a] = img[b], padw = x1a - x1b).
struct AugTile {
  int64_t offset;  ///< bytes from the tile arena base
  int64_t step;    ///< row step in bytes (>= 3 * w)
  int32_t h, w;
  int32_t ax, ay, aw, ah;
  int32_t padw, padh;
};

/// One warp: a src_w x src_h canvas filled with 114 and up to four tiles (disjoint rectangles),
/// warped with the inverse map `inv` (output px -> canvas px; row-major 3x3, the last row used
/// only when `perspective`) to the output size, bilinear, constant border 114. With
/// perspective == 0 `inv` is the 2x3 affine inverse as cv::warpAffine computes it (see
/// invert_affine_like_opencv), else the 3x3 inverse as cv::warpPerspective uses it.
struct AugWarp {
  AugTile tile[4];
  int32_t ntiles;
  int32_t src_w, src_h;
  int32_t perspective;
  double inv[9];
};

/// One training sample: warp[0] (and warp[1] blended in when nwarp == 2: official mixup,
/// uint8(trunc(a * mix_r + b * mix_r2)) with float64 products and sum, mix_r2 = 1 - mix_r), then
/// augment_hsv with the gains (gh, gs, gv) when hsv, then flipud, then fliplr.
struct AugSample {
  AugWarp warp[2];
  int32_t nwarp;
  int32_t hsv, flipud, fliplr;
  double mix_r, mix_r2;
  double gh, gs, gv;
};

/// How cv::cvtColor(HSV2BGR) rounds by row position (kernels::cpu::HsvModel as a plain struct):
/// pixels [0, w / simd_block * simd_block) of a w-pixel row use the `simd_*` rule, the rest the
/// `tail_*` rule; trunc = truncating conversion, fma2 / fma3 = the FMA contractions of tab2 / tab3.
struct AugHsvModel {
  int32_t simd_block = 32;
  uint8_t simd_trunc = 1, simd_fma2 = 1, simd_fma3 = 1;
  uint8_t tail_trunc = 0, tail_fma2 = 1, tail_fma3 = 0;
};

/// Layout of an augmentation output batch of n images of out_h x out_w:
///  - HwcBgrU8: [n, out_h, out_w, 3] uint8 BGR (the CPU pipeline's cv::Mat bytes; dtype U8);
///  - ChwRgb: [n, 3, out_h, out_w] RGB planes (official collate: HWC->CHW, BGR->RGB) as uint8
///    (dtype U8), or float(u8) / 255.0f (official imgs.float() / 255, an FP32 division) stored as
///    F32, F16 or BF16 (round to nearest even from that FP32 value).
enum class AugLayout : int32_t { HwcBgrU8 = 0, ChwRgb = 1 };

/// One validation sample for letterbox: the h x w x 3 uint8 BGR source at src + offset (row step
/// `step` bytes), resized to nw x nh (cv::resize INTER_LINEAR; copied when equal to the source
/// size) and placed at (left, top) on an out_w x out_h canvas of 114 (official letterbox with
/// auto = False: copyMakeBorder(top, bottom, left, right)).
struct LetterboxSample {
  int64_t offset;
  int64_t step;
  int32_t h, w;
  int32_t nw, nh;
  int32_t top, left;
};

// ---------------------------------------------------------------------------------------------
// Entries

/// Renders n training samples: out image i = samples[i] applied to the tiles in the device
/// (or host, CPU entry) arena `tiles`. `samples` is an array of n AugSample in the entry's device
/// memory. `dtype` is the output's (U8 for HwcBgrU8; U8, F32, F16, BF16 for ChwRgb). Every output
/// byte is written. Deterministic, no atomics.
using AugmentWarpFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const uint8_t* tiles,
                               const AugSample* samples, int64_t n, int32_t out_h, int32_t out_w,
                               const AugHsvModel& model, AugLayout layout, void* out);
inline engine::KernelKey<AugmentWarpFn> kAugmentWarp{"augment_warp"};

/// Letterboxes n images from the arena `src` into out (layout and dtype as kAugmentWarp).
using LetterboxFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const uint8_t* src,
                             const LetterboxSample* samples, int64_t n, int32_t out_h, int32_t out_w,
                             AugLayout layout, void* out);
inline engine::KernelKey<LetterboxFn> kLetterbox{"letterbox"};

// ---------------------------------------------------------------------------------------------
// Shared per-pixel math

namespace augment {

// a * b, a + b rounded once each (k_mul_rn, k_add_rn: kernels/common/rounding.h): the OpenCV code
// modelled here is compiled for SSE2, without contraction.

/// OpenCV's saturate_cast<int>(double) (cvRound on x86-64: round half to even, INT_MIN out of range).
Y9_HD int round_int(double v) {
  if (!(v >= -2147483648.0 && v < 2147483648.0)) return INT32_MIN;
  const double r = rint(v);
  return r >= 2147483648.0 ? INT32_MIN : static_cast<int>(r);
}
Y9_HD int round_intf(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return INT32_MIN;
  return static_cast<int>(rintf(v));
}
Y9_HD int wrap_add(int a, int b) { return static_cast<int>(static_cast<unsigned>(a) + static_cast<unsigned>(b)); }
Y9_HD int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/// Pixel (x, y) of a warp's canvas (114 outside every tile and outside the canvas).
struct Pix {
  uint8_t c[3];
};
Y9_HD Pix canvas_pixel(const uint8_t* tiles, const AugWarp& w, int x, int y) {
  Pix p{{114, 114, 114}};
  if (x < 0 || y < 0 || x >= w.src_w || y >= w.src_h) return p;
  for (int k = 0; k < w.ntiles; ++k) {
    const AugTile& t = w.tile[k];
    if (x >= t.ax && x < t.ax + t.aw && y >= t.ay && y < t.ay + t.ah) {
      const uint8_t* q = tiles + t.offset + static_cast<int64_t>(y - t.padh) * t.step + 3 * (x - t.padw);
      p.c[0] = q[0], p.c[1] = q[1], p.c[2] = q[2];
      return p;
    }
  }
  return p;
}

/// Source position of output pixel (x, y) in OpenCV's 1/32-px fixed point: sx, sy (saturated to
/// int16 as OpenCV's map) and fractions fx, fy in 0..31.
///  - affine (cv::warpAffine, WarpAffineInvoker + warpAffineBlockline): X0 = round((M1*y + M2) *
///    1024) + 16, adelta = round(M0*x*1024), X = (X0 + adelta) >> 5 (Y with M4, M5, M3);
///  - perspective (WarpPerspectiveInvoker): W = M7*y + M8 + M6*x, W = W ? 32 / W : 0,
///    X = saturate_cast<int>(clip((M1*y + M2 + M0*x) * W)) (likewise Y).
struct Coord {
  int sx, sy, fx, fy;
};
Y9_HD Coord warp_coord(const AugWarp& w, int x, int y) {
  const double* M = w.inv;
  int X, Y;
  if (!w.perspective) {
    const int X0 = wrap_add(round_int(k_mul_rn(k_add_rn(k_mul_rn(M[1], y), M[2]), 1024.0)), 16);
    const int Y0 = wrap_add(round_int(k_mul_rn(k_add_rn(k_mul_rn(M[4], y), M[5]), 1024.0)), 16);
    const int adelta = round_int(k_mul_rn(k_mul_rn(M[0], x), 1024.0));
    const int bdelta = round_int(k_mul_rn(k_mul_rn(M[3], x), 1024.0));
    X = wrap_add(X0, adelta) >> 5;
    Y = wrap_add(Y0, bdelta) >> 5;
  } else {
    const double X0 = k_add_rn(k_mul_rn(M[1], y), M[2]), Y0 = k_add_rn(k_mul_rn(M[4], y), M[5]), W0 = k_add_rn(k_mul_rn(M[7], y), M[8]);
    double W = k_add_rn(W0, k_mul_rn(M[6], x));
    W = W != 0 ? 32.0 / W : 0.0;
    double fX = k_mul_rn(k_add_rn(X0, k_mul_rn(M[0], x)), W), fY = k_mul_rn(k_add_rn(Y0, k_mul_rn(M[3], x)), W);
    fX = fX < -2147483648.0 ? -2147483648.0 : fX > 2147483647.0 ? 2147483647.0 : fX;
    fY = fY < -2147483648.0 ? -2147483648.0 : fY > 2147483647.0 ? 2147483647.0 : fY;
    X = round_int(fX);
    Y = round_int(fY);
  }
  return {clampi(X >> 5, -32768, 32767), clampi(Y >> 5, -32768, 32767), X & 31, Y & 31};
}

/// remapBilinear of 8-bit 3-channel pixels: (wx0 * (wy0*S00 + wy1*S10) + wx1 * (wy0*S01 + wy1*S11)
/// + 512) >> 10, taps outside the canvas = 114 (kernels/cpu/warp.cpp explains the model).
Y9_HD Pix warp_pixel(const uint8_t* tiles, const AugWarp& w, int x, int y) {
  const Coord c = warp_coord(w, x, y);
  Pix out{{114, 114, 114}};
  if (c.sx < -1 || c.sy < -1 || c.sx >= w.src_w || c.sy >= w.src_h) return out;
  const Pix s00 = canvas_pixel(tiles, w, c.sx, c.sy), s01 = canvas_pixel(tiles, w, c.sx + 1, c.sy);
  const Pix s10 = canvas_pixel(tiles, w, c.sx, c.sy + 1), s11 = canvas_pixel(tiles, w, c.sx + 1, c.sy + 1);
  const int wx0 = 32 - c.fx, wx1 = c.fx, wy0 = 32 - c.fy, wy1 = c.fy;
  for (int k = 0; k < 3; ++k) {
    const int v = (wx0 * (wy0 * s00.c[k] + wy1 * s10.c[k]) + wx1 * (wy0 * s01.c[k] + wy1 * s11.c[k]) + 512) >> 10;
    out.c[k] = static_cast<uint8_t>(clampi(v, 0, 255));
  }
  return out;
}

/// Official mixup on one byte: uint8(a * r + b * r2), float64 products and sum, truncated.
Y9_HD uint8_t mixup_byte(uint8_t a, uint8_t b, double r, double r2) {
  return static_cast<uint8_t>(static_cast<int>(k_add_rn(k_mul_rn(static_cast<double>(a), r), k_mul_rn(static_cast<double>(b), r2))));
}

// --- augment_hsv (OpenCV 4.6 RGB2HSV_b / HSV2RGB_b, as kernels/cpu/color.cpp) -----------------

/// The augment_hsv LUT entries for x in 0..255 (io::apply_hsv's LUT).
Y9_HD uint8_t lut_h(int x, double g) { return static_cast<uint8_t>(fmod(x * g, 180.0)); }
Y9_HD uint8_t lut_sv(int x, double g) {
  const double v = x * g;
  return static_cast<uint8_t>(v < 0.0 ? 0.0 : v > 255.0 ? 255.0 : v);
}

Y9_HD void bgr2hsv(int b, int g, int r, int& h, int& s, int& v) {
  v = b > g ? (b > r ? b : r) : (g > r ? g : r);
  const int vmin = b < g ? (b < r ? b : r) : (g < r ? g : r);
  const int diff = v - vmin;
  const int vr = v == r ? -1 : 0, vg = v == g ? -1 : 0;
  const int sdiv = v == 0 ? 0 : round_int((255 << 12) / (1. * v));
  const int hdiv = diff == 0 ? 0 : round_int((180 << 12) / (6. * diff));
  s = (diff * sdiv + (1 << 11)) >> 12;
  h = (vr & (g - b)) + (~vr & ((vg & (b - r + 2 * diff)) + (~vg & (r - g + 4 * diff))));
  h = (h * hdiv + (1 << 11)) >> 12;
  h += h < 0 ? 180 : 0;
}

Y9_HD uint8_t hsv_to_u8(float x, bool trunc) {
  const int i = trunc ? static_cast<int>(x) : round_intf(x);
  return static_cast<uint8_t>(clampi(i, 0, 255));
}

/// HSV2RGB_b on one pixel with the rule (trunc, fma2, fma3); writes B, G, R.
Y9_HD void hsv2bgr(int hi, int si, int vi, bool trunc, bool fma2, bool fma3, uint8_t* bgr) {
  const float h = static_cast<float>(hi), s = k_mul_rn(static_cast<float>(si), 1.0f / 255.0f),
              v = k_mul_rn(static_cast<float>(vi), 1.0f / 255.0f);
  const float hh = k_mul_rn(h, 6.0f / 180);
  const float pre = static_cast<float>(static_cast<int>(hh));
  const int sector = static_cast<int>(pre);
  const float f = k_add_rn(hh, -pre);
  const float t0 = v;
  const float t1 = k_mul_rn(v, k_add_rn(1.f, -s));
  const float t2 = k_mul_rn(v, fma2 ? fmaf(-s, f, 1.f) : k_add_rn(1.f, -k_mul_rn(s, f)));
  const float omf = k_add_rn(1.f, -f);
  const float t3 = k_mul_rn(v, fma3 ? fmaf(-s, omf, 1.f) : k_add_rn(1.f, -k_mul_rn(s, omf)));
  // sector_data of HSV2RGB_b: (b, g, r) = tab[...] per sector (selects, not an indexed local
  // array: no stack frame on the device)
  auto tab = [&](int i) { return i == 0 ? t0 : i == 1 ? t1 : i == 2 ? t2 : t3; };
  const int bi = sector == 0 || sector == 1 ? 1 : sector == 2 ? 3 : sector == 5 ? 2 : 0;
  const int gi = sector == 0 ? 3 : sector == 1 || sector == 2 ? 0 : sector == 3 ? 2 : 1;
  const int ri = sector == 0 || sector == 5 ? 0 : sector == 1 ? 2 : sector == 4 ? 3 : 1;
  bgr[0] = hsv_to_u8(k_mul_rn(tab(bi), 255.0f), trunc);
  bgr[1] = hsv_to_u8(k_mul_rn(tab(gi), 255.0f), trunc);
  bgr[2] = hsv_to_u8(k_mul_rn(tab(ri), 255.0f), trunc);
}

/// augment_hsv of one pixel at column `x` of a `w`-pixel row (the column picks OpenCV's rule).
Y9_HD Pix hsv_pixel(Pix p, double gh, double gs, double gv, const AugHsvModel& m, int x, int w) {
  int h, s, v;
  bgr2hsv(p.c[0], p.c[1], p.c[2], h, s, v);
  const int nsimd = m.simd_block > 0 ? w / m.simd_block * m.simd_block : 0;
  const bool simd = x < nsimd;
  Pix o;
  hsv2bgr(lut_h(h, gh), lut_sv(s, gs), lut_sv(v, gv), simd ? m.simd_trunc : m.tail_trunc,
          simd ? m.simd_fma2 : m.tail_fma2, simd ? m.simd_fma3 : m.tail_fma3, o.c);
  return o;
}

// --- cv::resize INTER_LINEAR on 8-bit (HResizeLinear + VResizeLinear, 11-bit fixed point) ------

/// Horizontal (or vertical) source index and the two fixed-point weights of destination index d
/// for a source of n and a destination of dn: f = float((d + 0.5) * scale - 0.5), s = floor(f),
/// weights saturate_cast<short>((1 - f) * 2048), saturate_cast<short>(f * 2048). `clamp_edges`
/// applies the x rule (s < 0: s = 0, f = 0; s >= n - 1: s = n - 1, f = 0); rows are clamped by
/// the caller instead (the row weights keep their fraction).
struct ResizeTap {
  int s;
  int w0, w1;
};
Y9_HD ResizeTap resize_tap(int d, int n, int dn, bool clamp_edges) {
  const double scale = 1.0 / (static_cast<double>(dn) / n);
  float f = static_cast<float>(k_add_rn(k_mul_rn(d + 0.5, scale), -0.5));
  int s = static_cast<int>(floorf(f));
  f = k_add_rn(f, -static_cast<float>(s));
  if (clamp_edges) {
    if (s < 0) f = 0, s = 0;
    if (s >= n - 1) f = 0, s = n - 1;
  }
  return {s, round_intf(k_mul_rn(k_add_rn(1.f, -f), 2048.f)), round_intf(k_mul_rn(f, 2048.f))};
}

/// Channel c of destination pixel (dx, dy) of cv::resize(src h x w -> nh x nw, INTER_LINEAR).
/// The vertical pass follows OpenCV's SIMD formula ((b0*(S0>>4))>>16 + (b1*(S1>>4))>>16 + 2) >> 2;
/// its scalar row tail rounds (v + 2^21) >> 22 instead (at most 1 apart). Exact 2x shrinks take
/// OpenCV's area shortcut: (a + b + c + d + 2) >> 2.
Y9_HD uint8_t resize_linear(const uint8_t* src, int64_t step, int h, int w, int nh, int nw, int dx, int dy, int c) {
  if (w == 2 * nw && h == 2 * nh) {
    const uint8_t* r0 = src + static_cast<int64_t>(2 * dy) * step + 3 * (2 * dx) + c;
    const uint8_t* r1 = r0 + step;
    return static_cast<uint8_t>((r0[0] + r0[3] + r1[0] + r1[3] + 2) >> 2);
  }
  const ResizeTap tx = resize_tap(dx, w, nw, true), ty = resize_tap(dy, h, nh, false);
  int hres[2];
  for (int k = 0; k < 2; ++k) {
    const uint8_t* row = src + static_cast<int64_t>(clampi(ty.s + k, 0, h - 1)) * step;
    hres[k] = tx.s >= w - 1 ? row[3 * (w - 1) + c] * 2048 : row[3 * tx.s + c] * tx.w0 + row[3 * (tx.s + 1) + c] * tx.w1;
  }
  const int v = ((((hres[0] >> 4) * ty.w0) >> 16) + (((hres[1] >> 4) * ty.w1) >> 16) + 2) >> 2;
  return static_cast<uint8_t>(clampi(v, 0, 255));
}

/// Letterbox pixel (x, y) of one sample.
Y9_HD Pix letterbox_pixel(const uint8_t* src, const LetterboxSample& s, int x, int y) {
  Pix p{{114, 114, 114}};
  const int lx = x - s.left, ly = y - s.top;
  if (lx < 0 || ly < 0 || lx >= s.nw || ly >= s.nh) return p;
  const uint8_t* base = src + s.offset;
  if (s.nw == s.w && s.nh == s.h) {
    const uint8_t* q = base + static_cast<int64_t>(ly) * s.step + 3 * lx;
    p.c[0] = q[0], p.c[1] = q[1], p.c[2] = q[2];
    return p;
  }
  for (int c = 0; c < 3; ++c) p.c[c] = resize_linear(base, s.step, s.h, s.w, s.nh, s.nw, lx, ly, c);
  return p;
}

/// One training-sample output pixel (x, y) before layout: the pre-flip position, the warp(s),
/// mixup and augment_hsv (the row rule of HSV2BGR follows the pre-flip column).
Y9_HD Pix sample_pixel(const uint8_t* tiles, const AugSample& s, const AugHsvModel& m, int x, int y, int out_h,
                       int out_w) {
  const int px = s.fliplr ? out_w - 1 - x : x;
  const int py = s.flipud ? out_h - 1 - y : y;
  Pix p = warp_pixel(tiles, s.warp[0], px, py);
  if (s.nwarp > 1) {
    const Pix q = warp_pixel(tiles, s.warp[1], px, py);
    for (int c = 0; c < 3; ++c) p.c[c] = mixup_byte(p.c[c], q.c[c], s.mix_r, s.mix_r2);
  }
  if (s.hsv) p = hsv_pixel(p, s.gh, s.gs, s.gv, m, px, out_w);
  return p;
}

/// float(u8) / 255.0f, the official imgs.float() / 255.
Y9_HD float to_unit(uint8_t v) { return static_cast<float>(v) / 255.0f; }

}  // namespace augment

/// cv::warpAffine's inversion of the forward 2x3 map `fwd` (row-major) into `inv` (2x3, in the
/// first six entries), operation by operation (D = 1 / (M0*M4 - M1*M3), ...; 0 when singular).
/// Host code (compiled without FMA contraction, as OpenCV).
inline void invert_affine_like_opencv(const double fwd[6], double inv[6]) {
  double M[6];
  for (int i = 0; i < 6; ++i) M[i] = fwd[i];
  double D = M[0] * M[4] - M[1] * M[3];
  D = D != 0 ? 1. / D : 0.;
  const double A11 = M[4] * D, A22 = M[0] * D;
  M[0] = A11;
  M[1] *= -D;
  M[3] *= -D;
  M[4] = A22;
  const double b1 = -M[0] * M[2] - M[1] * M[5];
  const double b2 = -M[3] * M[2] - M[4] * M[5];
  M[2] = b1;
  M[5] = b2;
  for (int i = 0; i < 6; ++i) inv[i] = M[i];
}

}  // namespace kernels
