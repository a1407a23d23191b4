// kernels::cpu::warp_affine_axis_aligned_u8c3: cv::warpAffine(INTER_LINEAR, BORDER_CONSTANT) for
// uint8 3-channel images and scale + translation matrices, bitwise equal to OpenCV 4.6, with
// per-column / per-row tables and an AVX2 kernel (scalar fallback). io/warp.cpp wraps it for
// cv::Mat and guards it with a one-time self-check against cv::warpAffine.
#include "kernels/cpu/warp.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define Y9_WARP_X86 1
#include <immintrin.h>
#endif

#include "engine/error.h"
#include "kernels/common/augment.h"

// ---------------------------------------------------------------------------------------------
// The model of OpenCV 4.6 (modules/imgproc/src/imgwarp.cpp), checked against the library by
// tests/io/warp_test.cpp:
//  1. cv::warpAffine inverts M in double (D = 1/(M0*M4 - M1*M3), ...). With M1 = M3 = 0 the inverse
//     keeps M1 = M3 = +-0, so source x depends on the output column only and source y on the row.
//  2. WarpAffineInvoker: adelta[x] = saturate_cast<int>(M0*x*1024), X0 = saturate_cast<int>((M1*y +
//     M2)*1024) + 16 (likewise Y0, bdelta = 0); warpAffineBlockline: X = (X0 + adelta[x]) >> 5
//     (32-bit wrap-around in the SIMD code), sx = saturate_cast<short>(X >> 5), fx = X & 31.
//     saturate_cast<int>(double) is cvRound: _mm_cvtsd_si32, INT_MIN when out of range.
//  3. remapBilinear (FixedPtCast<int, uchar, 15>, BilinearTab_i): dst = (sum_k S_k w_k + 2^14) >> 15
//     with w = 32 * (32 - fy | fy) * (32 - fx | fx). Taps outside src read the border value (the
//     "fully outside" branch writes the border value, which is what the formula gives too). The table
//     cell (0, 0) holds (32767, 0, 0, 1) instead of (32768, 0, 0, 0) (saturate_cast<short> plus
//     initInterTab2D's sum fix); for 8-bit taps both give S00, since |S11 - S00| < 2^14.
//     Hence dst = (wx0 * (wy0*S00 + wy1*S10) + wx1 * (wy0*S01 + wy1*S11) + 512) >> 10: the kernels
//     blend vertically first (fits int16: pmaddubsw), then horizontally (pmaddwd).
//  4. Interior / border classification only picks OpenCV's code path, not the value: every path
//     computes (3) with out-of-range taps = border.

namespace kernels::cpu {
namespace {

constexpr int kInterBits = 5;                // INTER_BITS
constexpr int kAbScale = 1 << 10;            // AB_SCALE = 1 << AB_BITS
constexpr int kRoundDelta = kAbScale / 32 / 2;  // round_delta for INTER_LINEAR

/// Blocks floating-point contraction (FMA) of a product with a following add: the library computes
/// (M4*y + M5) with two roundings (it is built for baseline SSE2).
inline double no_fuse(double v) {
#if defined(Y9_WARP_X86)
  asm("" : "+x"(v));
#else
  volatile double t = v;
  v = t;
#endif
  return v;
}

inline int wrap_add(int a, int b) {
  return static_cast<int>(static_cast<unsigned>(a) + static_cast<unsigned>(b));
}

/// OpenCV 4.6's saturate_cast<int>(double), cvRound: on x86-64 its inline _mm_cvtsd_si32 (round
/// half to even, INT_MIN when out of range), elsewhere lrint as its GCC fallback.
inline int round_to_int(double v) {
#if defined(Y9_WARP_X86)
  return _mm_cvtsd_si32(_mm_set_sd(v));
#else
  return static_cast<int>(std::lrint(v));
#endif
}

/// OpenCV's saturate_cast<short>(int).
inline int saturate_short(int v) { return std::clamp(v, static_cast<int>(SHRT_MIN), static_cast<int>(SHRT_MAX)); }

/// Integer source coordinate (already saturated to int16 as OpenCV's map) and 1/32 fraction.
struct Coord {
  int s;
  int f;
};

inline Coord split_coord(int X) {  // X in 1/32 px
  return {saturate_short(X >> kInterBits), X & 31};
}

enum ColClass : uint8_t { kOut, kEdge, kInScalar, kInSimd };

struct Run {
  int x0, x1;
  ColClass cls;
};

struct Tables {
  std::vector<int> col_ofs;     // sx * 3 (bytes)
  std::vector<int16_t> col_wx;  // 8 int16 per column: (32-fx, fx) x 3, 0, 0
  std::vector<Coord> cols, rows;
  std::vector<Run> runs;
};

void build_tables(const double M[6], int W, int H, int dw, int dh, Tables& t) {
  t.cols.resize(dw);
  t.col_ofs.resize(dw);
  t.col_wx.assign(8 * static_cast<size_t>(dw), 0);
  // X0 of WarpAffineInvoker: M1 * y is +-0, so X0 is the same for every row.
  const int X0 = wrap_add(round_to_int((no_fuse(M[1] * 0) + M[2]) * kAbScale), kRoundDelta);
  std::vector<ColClass> cls(dw);
  for (int x = 0; x < dw; ++x) {
    const int adelta = round_to_int(M[0] * x * kAbScale);
    const Coord c = split_coord(wrap_add(X0, adelta) >> (10 - kInterBits));
    t.cols[x] = c;
    t.col_ofs[x] = 3 * c.s;
    for (int k = 0; k < 3; ++k) {
      t.col_wx[8 * x + 2 * k] = static_cast<int16_t>(32 - c.f);
      t.col_wx[8 * x + 2 * k + 1] = static_cast<int16_t>(c.f);
    }
    if (c.s < -1 || c.s >= W) cls[x] = kOut;
    else if (c.s < 0 || c.s + 1 > W - 1) cls[x] = kEdge;
    else if (c.s > W - 3) cls[x] = kInScalar;  // an 8-byte load at sx would pass the row end
    else cls[x] = kInSimd;
  }
  t.runs.clear();
  for (int x = 0; x < dw;) {
    int e = x + 1;
    while (e < dw && cls[e] == cls[x]) ++e;
    t.runs.push_back({x, e, cls[x]});
    x = e;
  }
  t.rows.resize(dh);
  for (int y = 0; y < dh; ++y) {
    const int Y0 = wrap_add(round_to_int((no_fuse(M[4] * y) + M[5]) * kAbScale), kRoundDelta);
    const int bdelta = round_to_int(M[3] * 0 * kAbScale);  // M3 = +-0
    t.rows[y] = split_coord(wrap_add(Y0, bdelta) >> (10 - kInterBits));
  }
  (void)H;
}

inline uint8_t finish(int v, int bias) { return static_cast<uint8_t>(std::clamp((v + bias) >> 10, 0, 255)); }

/// One pixel whose four taps are inside src.
inline void pixel_inside(const uint8_t* p0, const uint8_t* p1, int wx0, int wx1, int wy0, int wy1, int bias,
                         uint8_t* d) {
  for (int c = 0; c < 3; ++c)
    d[c] = finish(wx0 * (wy0 * p0[c] + wy1 * p1[c]) + wx1 * (wy0 * p0[c + 3] + wy1 * p1[c + 3]), bias);
}

/// The source image: H x W pixels, row y at data + y * step.
struct Image {
  const uint8_t* data;
  int H, W;
  int64_t step;
};

/// One pixel with at least one tap outside src (taps outside read `bv`).
inline void pixel_general(const Image& src, int sx, int sy, int fx, int fy, const uint8_t* bv, int bias,
                          uint8_t* d) {
  const unsigned W = static_cast<unsigned>(src.W), H = static_cast<unsigned>(src.H);
  auto tap = [&](int x, int y) -> const uint8_t* {
    return static_cast<unsigned>(x) < W && static_cast<unsigned>(y) < H ? src.data + y * src.step + 3 * x : bv;
  };
  const uint8_t *t00 = tap(sx, sy), *t01 = tap(sx + 1, sy), *t10 = tap(sx, sy + 1), *t11 = tap(sx + 1, sy + 1);
  const int wx0 = 32 - fx, wx1 = fx, wy0 = 32 - fy, wy1 = fy;
  for (int c = 0; c < 3; ++c)
    d[c] = finish(wx0 * (wy0 * t00[c] + wy1 * t10[c]) + wx1 * (wy0 * t01[c] + wy1 * t11[c]), bias);
}

void run_inside_scalar(const uint8_t* r0, const uint8_t* r1, const Tables& t, int x0, int x1, int wy0, int wy1,
                       int bias, uint8_t* drow) {
  for (int x = x0; x < x1; ++x) {
    const int o = t.col_ofs[x], fx = t.cols[x].f;
    pixel_inside(r0 + o, r1 + o, 32 - fx, fx, wy0, wy1, bias, drow + 3 * x);
  }
}

#if defined(Y9_WARP_X86)
#define Y9_AVX2 __attribute__((target("avx2")))

/// Output pixels x and x + 1 (one per 128-bit lane) as int32 (B, G, R, 0) before packing.
Y9_AVX2 inline __m256i pair_avx2(const uint8_t* r0, const uint8_t* r1, const int* ofs, const int16_t* wx, int x,
                                 __m256i shuf, __m256i wy, __m256i rb) {
  const int oa = ofs[x], ob = ofs[x + 1];
  const __m128i a = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r0 + oa)),
                                       _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r1 + oa)));
  const __m128i b = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r0 + ob)),
                                       _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r1 + ob)));
  __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
  v = _mm256_maddubs_epi16(_mm256_shuffle_epi8(v, shuf), wy);  // vertical blend: int16 <= 255 * 32
  v = _mm256_madd_epi16(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wx + 8 * x)));  // horizontal
  return _mm256_srai_epi32(_mm256_add_epi32(v, rb), 10);
}

/// Columns [x0, x1) of a row whose taps are all inside src and 8-byte loads at every sx are safe:
/// 8 pixels per step (pairs of pixels per 256-bit register).
Y9_AVX2 void run_inside_avx2(const uint8_t* r0, const uint8_t* r1, const Tables& t, int x0, int x1, int wy0,
                             int wy1, int bias, uint8_t* drow) {
  // bytes (lo = row sy, hi = row sy+1): a = S00, b = S01, c = S10, d = S11 -> (a c) (b d) pairs per channel
  const __m256i shuf = _mm256_setr_epi8(0, 8, 3, 11, 1, 9, 4, 12, 2, 10, 5, 13, -1, -1, -1, -1,  //
                                        0, 8, 3, 11, 1, 9, 4, 12, 2, 10, 5, 13, -1, -1, -1, -1);
  const __m256i wy = _mm256_set1_epi16(static_cast<short>((wy1 << 8) | wy0));
  const __m256i rb = _mm256_set1_epi32(bias);
  const __m256i perm1 = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i compact = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,  //
                                           0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i perm2 = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
  const int* ofs = t.col_ofs.data();
  const int16_t* wx = t.col_wx.data();
  int x = x0;
  for (; x + 8 <= x1; x += 8) {
    const __m256i s0 = pair_avx2(r0, r1, ofs, wx, x, shuf, wy, rb), s1 = pair_avx2(r0, r1, ofs, wx, x + 2, shuf, wy, rb);
    const __m256i s2 = pair_avx2(r0, r1, ofs, wx, x + 4, shuf, wy, rb), s3 = pair_avx2(r0, r1, ofs, wx, x + 6, shuf, wy, rb);
    // dwords after the packs: px0 px2 px4 px6 | px1 px3 px5 px7 (4 bytes each, the 4th is 0)
    __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(s0, s1), _mm256_packs_epi32(s2, s3));
    p = _mm256_permutevar8x32_epi32(p, perm1);
    p = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(p, compact), perm2);
    uint8_t* d = drow + 3 * x;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm256_castsi256_si128(p));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(d + 16), _mm256_extracti128_si256(p, 1));
  }
  run_inside_scalar(r0, r1, t, x, x1, wy0, wy1, bias, drow);
}
#endif

void fill_border(uint8_t* d, int n, const uint8_t* border_row) { std::memcpy(d, border_row, 3 * static_cast<size_t>(n)); }

void warp_rows(const Image& src, uint8_t* dst, int dst_h, int dw, int64_t dst_step, const Tables& t, uint8_t border,
               bool avx2, int bias) {
  const int W = src.W, H = src.H;
  const int64_t step = src.step;
  std::vector<uint8_t> border_row(3 * static_cast<size_t>(dw), border);
  const uint8_t bv[3] = {border, border, border};
  for (int y = 0; y < dst_h; ++y) {
    uint8_t* drow = dst + y * dst_step;
    const Coord r = t.rows[y];
    if (r.s < -1 || r.s >= H) {
      fill_border(drow, dw, border_row.data());
      continue;
    }
    const bool row_inside = r.s >= 0 && r.s + 1 <= H - 1;
    if (!row_inside) {
      for (const Run& run : t.runs) {
        if (run.cls == kOut) {
          fill_border(drow + 3 * run.x0, run.x1 - run.x0, border_row.data());
          continue;
        }
        for (int x = run.x0; x < run.x1; ++x)
          pixel_general(src, t.cols[x].s, r.s, t.cols[x].f, r.f, bv, bias, drow + 3 * x);
      }
      continue;
    }
    const uint8_t* r0 = src.data + r.s * step;
    const uint8_t* r1 = r0 + step;
    const int wy0 = 32 - r.f, wy1 = r.f;
    for (const Run& run : t.runs) {
      switch (run.cls) {
        case kOut:
          fill_border(drow + 3 * run.x0, run.x1 - run.x0, border_row.data());
          break;
        case kEdge:
          for (int x = run.x0; x < run.x1; ++x)
            pixel_general(src, t.cols[x].s, r.s, t.cols[x].f, r.f, bv, bias, drow + 3 * x);
          break;
        case kInSimd:
#if defined(Y9_WARP_X86)
          if (avx2) {
            run_inside_avx2(r0, r1, t, run.x0, run.x1, wy0, wy1, bias, drow);
            break;
          }
#endif
          [[fallthrough]];
        case kInScalar:
          run_inside_scalar(r0, r1, t, run.x0, run.x1, wy0, wy1, bias, drow);
          break;
      }
    }
  }
  (void)W;
}

}  // namespace

bool cpu_has_avx2() {
#if defined(Y9_WARP_X86)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

bool invert_affine_axis_aligned(const double fwd[6], double inv[6]) {
  for (int i = 0; i < 6; ++i)
    if (!std::isfinite(fwd[i])) return false;
  if (fwd[1] != 0 || fwd[3] != 0 || fwd[0] * fwd[4] == 0) return false;
  kernels::invert_affine_like_opencv(fwd, inv);  // cv::warpAffine's inversion, operation by operation
  for (int i = 0; i < 6; ++i)
    if (!std::isfinite(inv[i])) return false;
  return inv[1] == 0 && inv[3] == 0;
}

void warp_affine_axis_aligned_u8c3(const uint8_t* src, int src_h, int src_w, int64_t src_step, uint8_t* dst,
                                   int dst_h, int dst_w, int64_t dst_step, const double inv[6], uint8_t border,
                                   WarpKernel kernel, int round_bias) {
  Y9_CHECK_SHAPE(src_h >= 1 && src_w >= 1 && src_h <= SHRT_MAX && src_w <= SHRT_MAX && src_step >= 3 * int64_t{src_w},
                 "warp_affine_axis_aligned_u8c3: expected a source of 1..32767 x 1..32767 pixels and a row step >= "
                 "3 * width bytes, got ", src_h, "x", src_w, " step ", src_step);
  Y9_CHECK_SHAPE(dst_h >= 1 && dst_w >= 1 && dst_step >= 3 * int64_t{dst_w},
                 "warp_affine_axis_aligned_u8c3: expected a destination of at least 1x1 pixels and a row step >= "
                 "3 * width bytes, got ", dst_h, "x", dst_w, " step ", dst_step);
  Y9_CHECK(src && dst && inv, "warp_affine_axis_aligned_u8c3: null pointer");
  const auto s0 = reinterpret_cast<uintptr_t>(src), d0 = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t s1 = s0 + static_cast<uintptr_t>((src_h - 1) * src_step + 3 * int64_t{src_w});
  const uintptr_t d1 = d0 + static_cast<uintptr_t>((dst_h - 1) * dst_step + 3 * int64_t{dst_w});
  Y9_CHECK(s1 <= d0 || d1 <= s0, "warp_affine_axis_aligned_u8c3: dst overlaps src");
  Y9_CHECK(inv[1] == 0 && inv[3] == 0 && std::all_of(inv, inv + 6, [](double v) { return std::isfinite(v); }),
           "warp_affine_axis_aligned_u8c3: the inverse map must be finite with inv[1] == inv[3] == 0, got [", inv[0],
           " ", inv[1], " ", inv[2], "; ", inv[3], " ", inv[4], " ", inv[5], "]");
  Y9_CHECK(kernel != WarpKernel::Avx2 || cpu_has_avx2(), "warp_affine_axis_aligned_u8c3: this CPU has no AVX2");
  Tables t;
  build_tables(inv, src_w, src_h, dst_w, dst_h, t);
  warp_rows(Image{src, src_h, src_w, src_step}, dst, dst_h, dst_w, dst_step, t, border, kernel == WarpKernel::Avx2,
            round_bias);
}

}  // namespace kernels::cpu
