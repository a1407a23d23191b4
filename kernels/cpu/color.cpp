// Fused augment_hsv + flipud + fliplr + HWC->RGB planes on raw BGR bytes (kernels/cpu/color.h).
// The HSV kernels reproduce OpenCV 4.6's uint8 RGB2HSV_b / HSV2RGB_b (modules/imgproc/src/
// color_hsv.simd.hpp) operation by operation; io/color.cpp decides by a one-time exhaustive
// comparison with cv::cvtColor whether they are used. Every float operation is written out
// (fp-contract off): the FMA steps are explicit.
#include "kernels/cpu/color.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define Y9_COLOR_X86 1
#endif

#include "engine/error.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace kernels::cpu {
namespace {

using Rule = HsvRule;
using Model = HsvModel;

/// OpenCV 4.6's saturate_cast<int>(double), cvRound: round half to even in the current (default)
/// mode; with SSE2 the same instruction as OpenCV's inline _mm_cvtsd_si32, else lrint as its GCC
/// fallback.
inline int round_to_int(double x) {
#if defined(Y9_COLOR_X86) && defined(__SSE2__)
  return _mm_cvtsd_si32(_mm_set_sd(x));
#else
  return static_cast<int>(std::lrint(x));
#endif
}

constexpr int kSectorTab[3][6] = {{1, 1, 3, 0, 0, 2},   // b = tab[...] per sector (sector_data[.][0])
                                  {3, 0, 0, 2, 1, 1},   // g
                                  {0, 2, 1, 1, 3, 0}};  // r

struct Tables {
  int32_t sdiv[256];
  int32_t hdiv[256];
  alignas(64) uint8_t sdiv_b[3][256];  ///< byte k of sdiv (< 2^20) (AVX-512 VBMI byte lookups)
  alignas(64) uint8_t hdiv_b[3][256];  ///< byte k of hdiv (< 2^17)
  Tables() {
    sdiv[0] = hdiv[0] = 0;
    for (int i = 1; i < 256; ++i) {
      sdiv[i] = round_to_int((255 << 12) / (1. * i));
      hdiv[i] = round_to_int((180 << 12) / (6. * i));
    }
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 256; ++i) {
        sdiv_b[k][i] = static_cast<uint8_t>(sdiv[i] >> 8 * k);
        hdiv_b[k][i] = static_cast<uint8_t>(hdiv[i] >> 8 * k);
      }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

/// The three augment_hsv LUTs, widened to int32 for gathers.
struct Luts {
  alignas(32) int32_t h[256];
  alignas(32) int32_t s[256];
  alignas(32) int32_t v[256];
  alignas(32) int32_t sdiv_v[256];  ///< sdiv_table[x] | v[x] << 24 (one gather for both, AVX2 kernel)
  alignas(64) uint8_t h8[256], s8[256], v8[256];  ///< the same LUTs as bytes (AVX-512 VBMI kernel)
  Luts(double gh, double gs, double gv) {
    for (int x = 0; x < 256; ++x) {  // exactly io::apply_hsv's LUT
      h[x] = static_cast<uint8_t>(std::fmod(x * gh, 180.0));
      s[x] = static_cast<uint8_t>(std::clamp(x * gs, 0.0, 255.0));
      v[x] = static_cast<uint8_t>(std::clamp(x * gv, 0.0, 255.0));
      sdiv_v[x] = static_cast<int32_t>(static_cast<uint32_t>(tables().sdiv[x]) | static_cast<uint32_t>(v[x]) << 24);
      h8[x] = static_cast<uint8_t>(h[x]), s8[x] = static_cast<uint8_t>(s[x]), v8[x] = static_cast<uint8_t>(v[x]);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Scalar kernel (x86-64 baseline and any other CPU)

inline void hsv_scalar(int b, int g, int r, int& h, int& s, int& v) {
  const Tables& t = tables();
  v = std::max(b, std::max(g, r));
  const int vmin = std::min(b, std::min(g, r));
  const int diff = v - vmin;
  const int vr = v == r ? -1 : 0, vg = v == g ? -1 : 0;
  s = (diff * t.sdiv[v] + (1 << 11)) >> 12;
  h = (vr & (g - b)) + (~vr & ((vg & (b - r + 2 * diff)) + (~vg & (r - g + 4 * diff))));
  h = (h * t.hdiv[diff] + (1 << 11)) >> 12;
  h += h < 0 ? 180 : 0;
}

inline int round_even(float x) {
#if defined(Y9_COLOR_X86)
  return _mm_cvtss_si32(_mm_set_ss(x));  // current (default nearest-even) mode, like cvRound
#else
  return static_cast<int>(std::lrint(x));
#endif
}

inline uint8_t to_u8(float x, bool trunc) {
  const int i = trunc ? static_cast<int>(x) : round_even(x);
  return static_cast<uint8_t>(std::clamp(i, 0, 255));
}

inline void bgr_scalar(int hi, int si, int vi, const Rule& rule, uint8_t& ob, uint8_t& og, uint8_t& orr) {
  const float h = static_cast<float>(hi), s = static_cast<float>(si) * (1.0f / 255.0f),
              v = static_cast<float>(vi) * (1.0f / 255.0f);
  const float hh = h * (6.0f / 180);  // hscale = 6.0f / 180 (float division) as in HSV2RGB_b
  const float pre = static_cast<float>(static_cast<int>(hh));  // hh in [0, 6): trunc == floor
  const int sector = static_cast<int>(pre);
  const float f = hh - pre;
  float tab[4];
  tab[0] = v;
  tab[1] = v * (1.f - s);
  tab[2] = v * (rule.fma2 ? std::fma(-s, f, 1.f) : 1.f - s * f);
  const float omf = 1.f - f;
  tab[3] = v * (rule.fma3 ? std::fma(-s, omf, 1.f) : 1.f - s * omf);
  ob = to_u8(tab[kSectorTab[0][sector]] * 255.0f, rule.trunc);
  og = to_u8(tab[kSectorTab[1][sector]] * 255.0f, rule.trunc);
  orr = to_u8(tab[kSectorTab[2][sector]] * 255.0f, rule.trunc);
}

/// One image row: `src` W BGR pixels -> plane rows (already at the flipud row).
void row_scalar(const uint8_t* src, int64_t w, const Luts* luts, const Model& m, bool fliplr, uint8_t* pr,
                uint8_t* pg, uint8_t* pb) {
  const int64_t nsimd = m.nsimd(w);
  for (int64_t x = 0; x < w; ++x) {
    const int64_t o = fliplr ? w - 1 - x : x;
    const uint8_t* p = src + 3 * x;
    if (!luts) {
      pb[o] = p[0], pg[o] = p[1], pr[o] = p[2];
      continue;
    }
    int h, s, v;
    hsv_scalar(p[0], p[1], p[2], h, s, v);
    bgr_scalar(luts->h[h], luts->s[s], luts->v[v], x < nsimd ? m.simd : m.tail, pb[o], pg[o], pr[o]);
  }
}

void bgr2hsv_scalar(const uint8_t* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    int h, s, v;
    hsv_scalar(src[3 * i], src[3 * i + 1], src[3 * i + 2], h, s, v);
    dst[3 * i] = static_cast<uint8_t>(h), dst[3 * i + 1] = static_cast<uint8_t>(s), dst[3 * i + 2] = static_cast<uint8_t>(v);
  }
}

void hsv2bgr_scalar(const uint8_t* src, uint8_t* dst, int64_t n, const Rule& rule) {
  for (int64_t i = 0; i < n; ++i)
    bgr_scalar(src[3 * i], src[3 * i + 1], src[3 * i + 2], rule, dst[3 * i], dst[3 * i + 1], dst[3 * i + 2]);
}

// ---------------------------------------------------------------------------------------------
// AVX2 + FMA kernel: 16 pixels per step (SSSE3 byte deinterleave, two 8-lane int32/float halves)

#if defined(Y9_COLOR_X86)
#define Y9_AVX2 __attribute__((target("avx2,fma")))

/// pshufb masks: channel c of 16 interleaved pixels from 16-byte part p of 48 bytes.
struct DeintMasks {
  alignas(16) uint8_t m[3][3][16];
  alignas(16) uint8_t inter[3][3][16];  ///< [output part][channel][byte]: the inverse shuffle
  alignas(16) uint8_t rev[16];
  DeintMasks() {
    for (int p = 0; p < 3; ++p)
      for (int c = 0; c < 3; ++c)
        for (int k = 0; k < 16; ++k) {
          const int j = 16 * p + k;
          inter[p][c][k] = j % 3 == c ? static_cast<uint8_t>(j / 3) : 0x80;
        }
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 3; ++p)
        for (int j = 0; j < 16; ++j) {
          const int src = 3 * j + c;
          m[c][p][j] = src / 16 == p ? static_cast<uint8_t>(src % 16) : 0x80;
        }
    for (int j = 0; j < 16; ++j) rev[j] = static_cast<uint8_t>(15 - j);
  }
};
const DeintMasks& deint_masks() {
  static const DeintMasks d;
  return d;
}

Y9_AVX2 inline void deinterleave16(const uint8_t* src, const DeintMasks& dm, __m128i& c0, __m128i& c1, __m128i& c2) {
  const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
  const __m128i a2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
  __m128i* out[3] = {&c0, &c1, &c2};
  for (int c = 0; c < 3; ++c) {
    const __m128i x0 = _mm_shuffle_epi8(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(dm.m[c][0])));
    const __m128i x1 = _mm_shuffle_epi8(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(dm.m[c][1])));
    const __m128i x2 = _mm_shuffle_epi8(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(dm.m[c][2])));
    *out[c] = _mm_or_si128(_mm_or_si128(x0, x1), x2);
  }
}

/// RGB2HSV_b on 8 pixels (int32 lanes in 0..255). `sdiv_tab[v]` holds sdiv_table[v] in its low 20
/// bits (sdiv <= 255 << 12); the fused kernel packs LUT_val[v] into bits 24..31 and gets the
/// gathered word back in `sraw`, saving one gather.
Y9_AVX2 inline void hsv8(__m256i b, __m256i g, __m256i r, const Tables& t, const int32_t* sdiv_tab, __m256i& h,
                         __m256i& s, __m256i& v, __m256i& sraw) {
  v = _mm256_max_epi32(b, _mm256_max_epi32(g, r));
  const __m256i vmin = _mm256_min_epi32(b, _mm256_min_epi32(g, r));
  const __m256i diff = _mm256_sub_epi32(v, vmin);
  const __m256i vr = _mm256_cmpeq_epi32(v, r), vg = _mm256_cmpeq_epi32(v, g);
  const __m256i half = _mm256_set1_epi32(1 << 11);
  sraw = _mm256_i32gather_epi32(sdiv_tab, v, 4);
  const __m256i sdiv = _mm256_and_si256(sraw, _mm256_set1_epi32(0xFFFFF));
  s = _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(diff, sdiv), half), 12);
  const __m256i gb = _mm256_sub_epi32(g, b);
  const __m256i br = _mm256_add_epi32(_mm256_sub_epi32(b, r), _mm256_slli_epi32(diff, 1));
  const __m256i rg = _mm256_add_epi32(_mm256_sub_epi32(r, g), _mm256_slli_epi32(diff, 2));
  const __m256i hn = _mm256_add_epi32(
      _mm256_and_si256(vr, gb),
      _mm256_andnot_si256(vr, _mm256_add_epi32(_mm256_and_si256(vg, br), _mm256_andnot_si256(vg, rg))));
  const __m256i hdiv = _mm256_i32gather_epi32(t.hdiv, diff, 4);
  h = _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(hn, hdiv), half), 12);
  h = _mm256_add_epi32(h, _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), h), _mm256_set1_epi32(180)));
}

Y9_AVX2 inline __m256 select_tab(__m256i sector, const int* sector_tab, __m256 t0, __m256 t1, __m256 t2, __m256 t3) {
  const __m256i tbl = _mm256_setr_epi32(sector_tab[0], sector_tab[1], sector_tab[2], sector_tab[3], sector_tab[4],
                                        sector_tab[5], 0, 0);
  const __m256i idx = _mm256_permutevar8x32_epi32(tbl, sector);
  const __m256 bit0 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 31));
  const __m256 bit1 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 30));
  const __m256 lo = _mm256_blendv_ps(t0, t1, bit0), hi = _mm256_blendv_ps(t2, t3, bit0);
  return _mm256_blendv_ps(lo, hi, bit1);
}

/// HSV2RGB_b on 8 pixels (int32 lanes h in 0..179, s, v in 0..255) -> int32 b, g, r (unsaturated).
Y9_AVX2 inline void bgr8(__m256i hi, __m256i si, __m256i vi, const Rule& rule, __m256i& ob, __m256i& og, __m256i& orr) {
  const __m256 c0 = _mm256_set1_ps(1.0f / 255.0f), c255 = _mm256_set1_ps(255.0f), one = _mm256_set1_ps(1.0f);
  const __m256 h = _mm256_cvtepi32_ps(hi);
  const __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(si), c0);
  const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(vi), c0);
  const __m256 hh = _mm256_mul_ps(h, _mm256_set1_ps(6.0f / 180));
  const __m256 pre = _mm256_round_ps(hh, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(hh, pre);
  const __m256i sector = _mm256_cvttps_epi32(pre);
  const __m256 t1 = _mm256_mul_ps(v, _mm256_sub_ps(one, s));
  const __m256 t2 = _mm256_mul_ps(v, rule.fma2 ? _mm256_fnmadd_ps(s, f, one) : _mm256_sub_ps(one, _mm256_mul_ps(s, f)));
  const __m256 omf = _mm256_sub_ps(one, f);
  const __m256 t3 =
      _mm256_mul_ps(v, rule.fma3 ? _mm256_fnmadd_ps(s, omf, one) : _mm256_sub_ps(one, _mm256_mul_ps(s, omf)));
  const __m256 fb = _mm256_mul_ps(select_tab(sector, kSectorTab[0], v, t1, t2, t3), c255);
  const __m256 fg = _mm256_mul_ps(select_tab(sector, kSectorTab[1], v, t1, t2, t3), c255);
  const __m256 fr = _mm256_mul_ps(select_tab(sector, kSectorTab[2], v, t1, t2, t3), c255);
  if (rule.trunc) {
    ob = _mm256_cvttps_epi32(fb), og = _mm256_cvttps_epi32(fg), orr = _mm256_cvttps_epi32(fr);
  } else {  // cvRound: round half to even (default MXCSR mode)
    ob = _mm256_cvtps_epi32(fb), og = _mm256_cvtps_epi32(fg), orr = _mm256_cvtps_epi32(fr);
  }
}

/// Two int32x8 (values saturated to 0..255) -> 16 bytes in order.
Y9_AVX2 inline __m128i pack16(__m256i lo, __m256i hi) {
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
  return _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

/// HSV2BGR of 8 pixels whose first has row position x0, with the rule of each position.
Y9_AVX2 inline void bgr8_at(__m256i h, __m256i s, __m256i v, int64_t x0, const Model& m, int64_t nsimd, __m256i& ob,
                            __m256i& og, __m256i& orr) {
  if (x0 + 8 <= nsimd) {
    bgr8(h, s, v, m.simd, ob, og, orr);
  } else if (x0 >= nsimd) {
    bgr8(h, s, v, m.tail, ob, og, orr);
  } else {  // the block boundary falls inside these 8 lanes
    __m256i b2, g2, r2;
    bgr8(h, s, v, m.simd, ob, og, orr);
    bgr8(h, s, v, m.tail, b2, g2, r2);
    const __m256i lane = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(x0)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i tail = _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(static_cast<int>(nsimd - 1)));
    ob = _mm256_blendv_epi8(ob, b2, tail), og = _mm256_blendv_epi8(og, g2, tail), orr = _mm256_blendv_epi8(orr, r2, tail);
  }
}

/// 16 pixels at row position x0 (48 source bytes) -> 16 bytes each of b, g, r.
Y9_AVX2 inline void finish16(const uint8_t* src, int64_t x0, const Luts* luts, const Model& m, int64_t nsimd,
                             const Tables& t, const DeintMasks& dm, __m128i& ob, __m128i& og, __m128i& orr) {
  __m128i b, g, r;
  deinterleave16(src, dm, b, g, r);
  if (!luts) {
    ob = b, og = g, orr = r;
    return;
  }
  __m256i res[3][2];
  for (int half = 0; half < 2; ++half) {
    const __m128i sh = half ? _mm_srli_si128(b, 8) : b;
    const __m128i gh = half ? _mm_srli_si128(g, 8) : g;
    const __m128i rh = half ? _mm_srli_si128(r, 8) : r;
    __m256i h, s, v, sraw;
    hsv8(_mm256_cvtepu8_epi32(sh), _mm256_cvtepu8_epi32(gh), _mm256_cvtepu8_epi32(rh), t, luts->sdiv_v, h, s, v, sraw);
    h = _mm256_i32gather_epi32(luts->h, h, 4);
    s = _mm256_i32gather_epi32(luts->s, s, 4);
    v = _mm256_srli_epi32(sraw, 24);  // LUT_val[v]
    bgr8_at(h, s, v, x0 + 8 * half, m, nsimd, res[0][half], res[1][half], res[2][half]);
  }
  ob = pack16(res[0][0], res[0][1]);
  og = pack16(res[1][0], res[1][1]);
  orr = pack16(res[2][0], res[2][1]);
}

Y9_AVX2 void row_avx2(const uint8_t* src, int64_t w, const Luts* luts, const Model& m, bool fliplr, uint8_t* pr,
                      uint8_t* pg, uint8_t* pb) {
  const Tables& t = tables();
  const DeintMasks& dm = deint_masks();
  const __m128i rev = _mm_load_si128(reinterpret_cast<const __m128i*>(dm.rev));
  const int64_t nsimd = m.nsimd(w);
  int64_t x = 0;
  __m128i b, g, r;
  for (; x + 16 <= w; x += 16) {
    finish16(src + 3 * x, x, luts, m, nsimd, t, dm, b, g, r);
    if (fliplr) {
      const int64_t o = w - x - 16;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pb + o), _mm_shuffle_epi8(b, rev));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pg + o), _mm_shuffle_epi8(g, rev));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pr + o), _mm_shuffle_epi8(r, rev));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pb + x), b);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pg + x), g);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pr + x), r);
    }
  }
  if (x < w) {  // row tail: through a zero-padded 16-pixel buffer, same code
    const int64_t n = w - x;
    alignas(16) uint8_t buf[48] = {0}, ob[3][16];
    std::memcpy(buf, src + 3 * x, static_cast<size_t>(3 * n));
    finish16(buf, x, luts, m, nsimd, t, dm, b, g, r);
    _mm_store_si128(reinterpret_cast<__m128i*>(ob[0]), b);
    _mm_store_si128(reinterpret_cast<__m128i*>(ob[1]), g);
    _mm_store_si128(reinterpret_cast<__m128i*>(ob[2]), r);
    uint8_t* planes[3] = {pb, pg, pr};
    for (int c = 0; c < 3; ++c)
      for (int64_t i = 0; i < n; ++i) planes[c][fliplr ? w - 1 - (x + i) : x + i] = ob[c][i];
  }
}

Y9_AVX2 inline void interleave16(__m128i c0, __m128i c1, __m128i c2, const DeintMasks& dm, uint8_t* dst) {
  for (int p = 0; p < 3; ++p) {
    const __m128i x0 = _mm_shuffle_epi8(c0, _mm_load_si128(reinterpret_cast<const __m128i*>(dm.inter[p][0])));
    const __m128i x1 = _mm_shuffle_epi8(c1, _mm_load_si128(reinterpret_cast<const __m128i*>(dm.inter[p][1])));
    const __m128i x2 = _mm_shuffle_epi8(c2, _mm_load_si128(reinterpret_cast<const __m128i*>(dm.inter[p][2])));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * p), _mm_or_si128(_mm_or_si128(x0, x1), x2));
  }
}

/// Stage kernels for the verification: the same inline pieces as row_avx2, interleaved in/out.
/// kind 0: BGR2HSV; kind 1: HSV2BGR with `rule`. 16 pixels a step, the last through a buffer.
Y9_AVX2 void stage_avx2(int kind, const uint8_t* src, uint8_t* dst, int64_t n, const Rule& rule) {
  const Tables& t = tables();
  const DeintMasks& dm = deint_masks();
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t k = std::min<int64_t>(16, n - i);
    alignas(16) uint8_t ibuf[48] = {0}, obuf[48];
    const uint8_t* in = src + 3 * i;
    if (k < 16) in = static_cast<const uint8_t*>(std::memcpy(ibuf, in, static_cast<size_t>(3 * k)));
    __m128i c0, c1, c2;
    deinterleave16(in, dm, c0, c1, c2);
    __m256i o[3][2];
    for (int half = 0; half < 2; ++half) {
      const __m256i x0 = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(c0, 8) : c0);
      const __m256i x1 = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(c1, 8) : c1);
      const __m256i x2 = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(c2, 8) : c2);
      __m256i sraw;
      if (kind == 0)
        hsv8(x0, x1, x2, t, t.sdiv, o[0][half], o[1][half], o[2][half], sraw);
      else
        bgr8(x0, x1, x2, rule, o[0][half], o[1][half], o[2][half]);
    }
    uint8_t* out = k < 16 ? obuf : dst + 3 * i;
    interleave16(pack16(o[0][0], o[0][1]), pack16(o[1][0], o[1][1]), pack16(o[2][0], o[2][1]), dm, out);
    if (k < 16) std::memcpy(dst + 3 * i, obuf, static_cast<size_t>(3 * k));
  }
}

// ---------------------------------------------------------------------------------------------
// AVX-512 (F, BW, VL, VBMI) kernel: 64 pixels per step, no gathers. Every 256-entry table is
// read with VBMI byte permutes over 64 lanes (two 128-entry halves, selected by the index's top
// bit); the int tables sdiv/hdiv as three byte planes. Byte vectors are widened to four int32
// "quarters" (16 px each) by byte permutes for the same integer and float math as the AVX2
// kernel; results are narrowed with saturating packs, whose lane-interleaved byte order
// ("packed" order: pixel 16q + 4l + e at byte 16l + 4q + e) one byte permute undoes at the store.

#define Y9_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive in its AVX-512 headers
#endif

/// Byte-permute index vectors of the AVX-512 kernel.
struct VbmiConsts {
  alignas(64) uint8_t deint[3][2][64];  ///< [channel]: from source bytes 0..127, from bytes 128..191
  uint64_t deint_k[3];                  ///< lanes of each channel taken from bytes 128..191
  alignas(64) uint8_t inter[3][2][64];  ///< [output part]: from channels 0|1, from channel 2
  uint64_t inter_k[3];                  ///< bytes of each part taken from channel 2
  alignas(64) uint8_t widen[4][64];     ///< quarter q, dword j: bytes 16q+j of sources (a, b, a, b)
  alignas(64) uint8_t widen_pk[4][64];  ///< quarter q, dword j: byte of pixel 16q+j in packed order
  alignas(64) uint8_t order[2][2][64];  ///< [packed][reversed]: to natural (reversed) pixel order
  static int packed_pos(int i) { return 16 * (i / 4 % 4) + 4 * (i / 16) + i % 4; }  // an involution
  VbmiConsts() {
    for (int c = 0; c < 3; ++c) {
      deint_k[c] = inter_k[c] = 0;
      for (int i = 0; i < 64; ++i) {
        const int pos = 3 * i + c, j = 64 * c + i, px = j / 3, ch = j % 3;  // deint: pixel i; inter: byte j
        deint[c][0][i] = static_cast<uint8_t>(pos & 127), deint[c][1][i] = static_cast<uint8_t>(pos & 63);
        if (pos >= 128) deint_k[c] |= uint64_t{1} << i;
        inter[c][0][i] = static_cast<uint8_t>(px + (ch == 1 ? 64 : 0)), inter[c][1][i] = static_cast<uint8_t>(px);
        if (ch == 2) inter_k[c] |= uint64_t{1} << i;
      }
    }
    for (int q = 0; q < 4; ++q)
      for (int k = 0; k < 64; ++k) {
        widen[q][k] = static_cast<uint8_t>(16 * q + k / 4 + (k % 2 ? 64 : 0));
        widen_pk[q][k] = static_cast<uint8_t>(packed_pos(16 * q + k / 4));
      }
    for (int pk = 0; pk < 2; ++pk)
      for (int rev = 0; rev < 2; ++rev)
        for (int i = 0; i < 64; ++i) {
          const int px = rev ? 63 - i : i;
          order[pk][rev][i] = static_cast<uint8_t>(pk ? packed_pos(px) : px);
        }
  }
};
const VbmiConsts& vbmi_consts() {
  static const VbmiConsts k;
  return k;
}

constexpr __mmask64 kByte0 = 0x1111111111111111, kByte2 = 0x4444444444444444, kBytes01 = 0x3333333333333333,
                    kBytes23 = 0xCCCCCCCCCCCCCCCC;

Y9_AVX512 inline __m512i load64(const uint8_t* p) { return _mm512_load_si512(p); }

/// t[idx] for 64 byte indices, `t` a 64-byte aligned 256-entry byte table.
Y9_AVX512 inline __m512i lut256(const uint8_t* t, __m512i idx) {
  const __m512i lo = _mm512_permutex2var_epi8(load64(t), idx, load64(t + 64));
  const __m512i hi = _mm512_permutex2var_epi8(load64(t + 128), idx, load64(t + 192));
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi);
}

/// Quarter `w` (a VbmiConsts::widen row) of byte vector a as int32 lanes (0..255).
Y9_AVX512 inline __m512i widen1(__m512i w, __m512i a) { return _mm512_maskz_permutexvar_epi8(kByte0, w, a); }
/// Quarter of the 3-byte values a | b << 8 | c << 16.
Y9_AVX512 inline __m512i widen3(__m512i w, __m512i a, __m512i b, __m512i c) {
  return _mm512_mask_permutexvar_epi8(_mm512_maskz_permutex2var_epi8(kBytes01, a, w, b), kByte2, w, c);
}

/// 64 pixels of 192 interleaved bytes -> one byte vector per channel (natural pixel order).
Y9_AVX512 inline void deint64(const uint8_t* src, const VbmiConsts& k, __m512i c[3]) {
  const __m512i a0 = _mm512_loadu_si512(src), a1 = _mm512_loadu_si512(src + 64), a2 = _mm512_loadu_si512(src + 128);
  for (int ch = 0; ch < 3; ++ch)
    c[ch] = _mm512_mask_permutexvar_epi8(_mm512_permutex2var_epi8(a0, load64(k.deint[ch][0]), a1), k.deint_k[ch],
                                         load64(k.deint[ch][1]), a2);
}

/// Four int32 quarters (values saturated to 0..255) -> 64 bytes in packed order.
Y9_AVX512 inline __m512i pack64(const __m512i q[4]) {
  return _mm512_packus_epi16(_mm512_packus_epi32(q[0], q[1]), _mm512_packus_epi32(q[2], q[3]));
}

/// RGB2HSV_b on 64 pixels (byte vectors, natural order) -> h, s bytes in packed order, v natural.
/// Same integer math as hsv8; hn = x - y + 2*w1 + 2*w2 with (x, y, w1, w2) = (g, b, 0, 0) where
/// v == r, (b, r, diff, 0) where v == g, else (r, g, diff, diff), by one maddubs + madd.
Y9_AVX512 inline void hsv64(__m512i b, __m512i g, __m512i r, const Tables& t, const VbmiConsts& k, __m512i& h,
                            __m512i& s, __m512i& v) {
  v = _mm512_max_epu8(b, _mm512_max_epu8(g, r));
  const __m512i diff = _mm512_sub_epi8(v, _mm512_min_epu8(b, _mm512_min_epu8(g, r)));
  const __mmask64 vr = _mm512_cmpeq_epi8_mask(v, r), vg = _mm512_cmpeq_epi8_mask(v, g);
  const __m512i x = _mm512_mask_blend_epi8(vr, _mm512_mask_blend_epi8(vg, r, b), g);
  const __m512i y = _mm512_mask_blend_epi8(vr, _mm512_mask_blend_epi8(vg, g, r), b);
  const __m512i w1 = _mm512_maskz_mov_epi8(~vr, diff), w2 = _mm512_maskz_mov_epi8(~(vr | vg), diff);
  __m512i sdiv[3], hdiv[3];
  for (int j = 0; j < 3; ++j) sdiv[j] = lut256(t.sdiv_b[j], v), hdiv[j] = lut256(t.hdiv_b[j], diff);
  const __m512i half = _mm512_set1_epi32(1 << 11), weights = _mm512_set1_epi32(0x0202FF01);  // bytes 1, -1, 2, 2
  __m512i hq[4], sq[4];
  for (int q = 0; q < 4; ++q) {
    const __m512i w = load64(k.widen[q]);
    const __m512i sd = widen3(w, sdiv[0], sdiv[1], sdiv[2]), hd = widen3(w, hdiv[0], hdiv[1], hdiv[2]);
    const __m512i xyw = _mm512_or_si512(_mm512_maskz_permutex2var_epi8(kBytes01, x, w, y),
                                        _mm512_maskz_permutex2var_epi8(kBytes23, w1, w, w2));
    const __m512i hn = _mm512_madd_epi16(_mm512_maddubs_epi16(xyw, weights), _mm512_set1_epi16(1));
    sq[q] = _mm512_srai_epi32(_mm512_add_epi32(_mm512_mullo_epi32(widen1(w, diff), sd), half), 12);
    const __m512i hh = _mm512_srai_epi32(_mm512_add_epi32(_mm512_mullo_epi32(hn, hd), half), 12);
    hq[q] = _mm512_mask_add_epi32(hh, _mm512_cmplt_epi32_mask(hh, _mm512_setzero_si512()), hh, _mm512_set1_epi32(180));
  }
  h = pack64(hq), s = pack64(sq);
}

/// HSV2RGB_b on 16 pixels (int32 lanes), as bgr8. The tab index of each channel comes from one
/// dword permute of kSectorTab packed 2 bits per channel.
Y9_AVX512 inline void bgr16(__m512i hi, __m512i si, __m512i vi, const Rule& rule, __m512i out[3]) {
  const __m512 c0 = _mm512_set1_ps(1.0f / 255.0f), c255 = _mm512_set1_ps(255.0f), one = _mm512_set1_ps(1.0f);
  const __m512 h = _mm512_cvtepi32_ps(hi);
  const __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(si), c0);
  const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(vi), c0);
  const __m512 hh = _mm512_mul_ps(h, _mm512_set1_ps(6.0f / 180));
  const __m512 pre = _mm512_roundscale_ps(hh, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(hh, pre);
  const __m512i sector = _mm512_cvttps_epi32(pre);
  const __m512 t1 = _mm512_mul_ps(v, _mm512_sub_ps(one, s));
  const __m512 t2 = _mm512_mul_ps(v, rule.fma2 ? _mm512_fnmadd_ps(s, f, one) : _mm512_sub_ps(one, _mm512_mul_ps(s, f)));
  const __m512 omf = _mm512_sub_ps(one, f);
  const __m512 t3 =
      _mm512_mul_ps(v, rule.fma3 ? _mm512_fnmadd_ps(s, omf, one) : _mm512_sub_ps(one, _mm512_mul_ps(s, omf)));
  constexpr auto bits = [](int sec) { return kSectorTab[0][sec] | kSectorTab[1][sec] << 2 | kSectorTab[2][sec] << 4; };
  const __m512i idx = _mm512_permutexvar_epi32(
      sector, _mm512_setr_epi32(bits(0), bits(1), bits(2), bits(3), bits(4), bits(5), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
  for (int c = 0; c < 3; ++c) {
    const __mmask16 bit0 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(1 << 2 * c));
    const __mmask16 bit1 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(2 << 2 * c));
    const __m512 lo = _mm512_mask_blend_ps(bit0, v, t1), hi = _mm512_mask_blend_ps(bit0, t2, t3);
    const __m512 x = _mm512_mul_ps(_mm512_mask_blend_ps(bit1, lo, hi), c255);
    out[c] = rule.trunc ? _mm512_cvttps_epi32(x) : _mm512_cvtps_epi32(x);  // cvRound: default MXCSR mode
  }
}

/// HSV2BGR of 64 pixels (int32 quarters) whose first has row position x0, with the rule of each
/// position (as bgr8_at) -> b, g, r bytes in packed order.
Y9_AVX512 inline void bgr64_at(const __m512i h[4], const __m512i s[4], const __m512i v[4], int64_t x0, const Model& m,
                               int64_t nsimd, __m512i out[3]) {
  __m512i res[3][4];
  for (int q = 0; q < 4; ++q) {
    const int64_t xq = x0 + 16 * q;
    __m512i a[3], b[3];
    bgr16(h[q], s[q], v[q], xq < nsimd ? m.simd : m.tail, a);
    if (xq < nsimd && xq + 16 > nsimd) {  // the block boundary falls inside these 16 lanes
      bgr16(h[q], s[q], v[q], m.tail, b);
      const __m512i lane = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(xq)),
                                            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
      const __mmask16 tail = _mm512_cmpge_epi32_mask(lane, _mm512_set1_epi32(static_cast<int>(nsimd)));
      for (int c = 0; c < 3; ++c) a[c] = _mm512_mask_blend_epi32(tail, a[c], b[c]);
    }
    for (int c = 0; c < 3; ++c) res[c][q] = a[c];
  }
  for (int c = 0; c < 3; ++c) out[c] = pack64(res[c]);
}

/// 64 pixels at row position x0 (192 source bytes) -> b, g, r bytes; returns whether they are in
/// packed order (else natural).
Y9_AVX512 inline bool finish64(const uint8_t* src, int64_t x0, const Luts* luts, const Model& m, int64_t nsimd,
                               const Tables& t, const VbmiConsts& k, __m512i out[3]) {
  deint64(src, k, out);
  if (!luts) return false;
  __m512i hb, sb, vb;
  hsv64(out[0], out[1], out[2], t, k, hb, sb, vb);
  hb = lut256(luts->h8, hb), sb = lut256(luts->s8, sb), vb = lut256(luts->v8, vb);
  __m512i h[4], s[4], v[4];
  for (int q = 0; q < 4; ++q) {
    const __m512i wp = load64(k.widen_pk[q]);
    h[q] = widen1(wp, hb), s[q] = widen1(wp, sb), v[q] = widen1(load64(k.widen[q]), vb);
  }
  bgr64_at(h, s, v, x0, m, nsimd, out);
  return true;
}

Y9_AVX512 void row_avx512(const uint8_t* src, int64_t w, const Luts* luts, const Model& m, bool fliplr, uint8_t* pr,
                          uint8_t* pg, uint8_t* pb) {
  const Tables& t = tables();
  const VbmiConsts& k = vbmi_consts();
  const int64_t nsimd = m.nsimd(w);
  uint8_t* planes[3] = {pb, pg, pr};
  const __m512i order = load64(k.order[luts != nullptr][fliplr]);
  __m512i c[3];
  int64_t x = 0;
  for (; x + 64 <= w; x += 64) {
    finish64(src + 3 * x, x, luts, m, nsimd, t, k, c);
    const int64_t o = fliplr ? w - x - 64 : x;
    for (int ch = 0; ch < 3; ++ch)
      _mm512_storeu_si512(planes[ch] + o, luts || fliplr ? _mm512_permutexvar_epi8(order, c[ch]) : c[ch]);
  }
  if (x < w) {  // row tail: through a zero-padded 64-pixel buffer, same code
    const int64_t n = w - x;
    alignas(64) uint8_t buf[192] = {0}, ob[3][64];
    std::memcpy(buf, src + 3 * x, static_cast<size_t>(3 * n));
    const __m512i natural = load64(k.order[finish64(buf, x, luts, m, nsimd, t, k, c)][0]);
    for (int ch = 0; ch < 3; ++ch) {
      _mm512_store_si512(ob[ch], _mm512_permutexvar_epi8(natural, c[ch]));
      for (int64_t i = 0; i < n; ++i) planes[ch][fliplr ? w - 1 - (x + i) : x + i] = ob[ch][i];
    }
  }
}

/// Stage kernels for the verification (as stage_avx2): the same inline pieces as row_avx512.
Y9_AVX512 void stage_avx512(int kind, const uint8_t* src, uint8_t* dst, int64_t n, const Rule& rule) {
  const Tables& t = tables();
  const VbmiConsts& k = vbmi_consts();
  Model all_simd;
  all_simd.simd = rule;
  const __m512i natural = load64(k.order[1][0]);
  for (int64_t i = 0; i < n; i += 64) {
    const int64_t cnt = std::min<int64_t>(64, n - i);
    alignas(64) uint8_t ibuf[192] = {0}, obuf[192];
    const uint8_t* in = src + 3 * i;
    if (cnt < 64) in = static_cast<const uint8_t*>(std::memcpy(ibuf, in, static_cast<size_t>(3 * cnt)));
    __m512i c[3], o[3];
    deint64(in, k, c);
    if (kind == 0) {
      hsv64(c[0], c[1], c[2], t, k, o[0], o[1], o[2]);
      o[0] = _mm512_permutexvar_epi8(natural, o[0]), o[1] = _mm512_permutexvar_epi8(natural, o[1]);
    } else {
      __m512i q[3][4];
      for (int j = 0; j < 4; ++j)
        for (int ch = 0; ch < 3; ++ch) q[ch][j] = widen1(load64(k.widen[j]), c[ch]);
      bgr64_at(q[0], q[1], q[2], 0, all_simd, 64, o);
      for (int ch = 0; ch < 3; ++ch) o[ch] = _mm512_permutexvar_epi8(natural, o[ch]);
    }
    uint8_t* out = cnt < 64 ? obuf : dst + 3 * i;
    for (int p = 0; p < 3; ++p)
      _mm512_storeu_si512(out + 64 * p, _mm512_mask_permutexvar_epi8(
                                            _mm512_permutex2var_epi8(o[0], load64(k.inter[p][0]), o[1]), k.inter_k[p],
                                            load64(k.inter[p][1]), o[2]));
    if (cnt < 64) std::memcpy(dst + 3 * i, obuf, static_cast<size_t>(3 * cnt));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // Y9_COLOR_X86

}  // namespace

bool cpu_has_avx2_fma() {
#if defined(Y9_COLOR_X86)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512vbmi() {
#if defined(Y9_COLOR_X86)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
  return has;
#else
  return false;
#endif
}

ColorKernel best_color_kernel() {
  return cpu_has_avx512vbmi() ? ColorKernel::Avx512 : cpu_has_avx2_fma() ? ColorKernel::Avx2 : ColorKernel::Scalar;
}

namespace {
/// Throws unless this CPU runs `kernel`.
void check_kernel(ColorKernel kernel, const char* who) {
  if (kernel == ColorKernel::Avx2) Y9_CHECK(cpu_has_avx2_fma(), who, ": this CPU has no AVX2+FMA");
  if (kernel == ColorKernel::Avx512) Y9_CHECK(cpu_has_avx512vbmi(), who, ": this CPU has no AVX-512 F/BW/VL/VBMI");
}
}  // namespace

void finish_to_planes_u8(const uint8_t* bgr, int64_t rows, int64_t cols, int64_t row_step, const PixelOps& ops,
                         const HsvModel& model, ColorKernel kernel, uint8_t* dst_r, uint8_t* dst_g, uint8_t* dst_b) {
  Y9_CHECK_SHAPE(rows >= 1 && cols >= 1 && row_step >= 3 * cols, "finish_to_planes_u8: expected rows, cols >= 1 "
                 "and row_step >= 3 * cols bytes, got ", rows, "x", cols, " step ", row_step);
  Y9_CHECK(bgr && dst_r && dst_g && dst_b, "finish_to_planes_u8: null pointer");
  check_kernel(kernel, "finish_to_planes_u8");
  const int64_t h = rows, w = cols;
  std::unique_ptr<Luts> luts;
  if (ops.hsv) luts = std::make_unique<Luts>(ops.gh, ops.gs, ops.gv);
  for (int64_t y = 0; y < h; ++y) {
    const int64_t oy = ops.flipud ? h - 1 - y : y;
    const uint8_t* src = bgr + y * row_step;
    uint8_t *pr = dst_r + oy * w, *pg = dst_g + oy * w, *pb = dst_b + oy * w;
#if defined(Y9_COLOR_X86)
    if (kernel == ColorKernel::Avx2) {
      row_avx2(src, w, luts.get(), model, ops.fliplr, pr, pg, pb);
      continue;
    }
    if (kernel == ColorKernel::Avx512) {
      row_avx512(src, w, luts.get(), model, ops.fliplr, pr, pg, pb);
      continue;
    }
#endif
    row_scalar(src, w, luts.get(), model, ops.fliplr, pr, pg, pb);
  }
}

void bgr2hsv_u8(const uint8_t* src, uint8_t* dst, int64_t n, ColorKernel kernel) {
  Y9_CHECK(n <= 0 || (src && dst), "bgr2hsv_u8: null pointer");
  check_kernel(kernel, "bgr2hsv_u8");
#if defined(Y9_COLOR_X86)
  if (kernel == ColorKernel::Avx2) return stage_avx2(0, src, dst, n, Rule{});
  if (kernel == ColorKernel::Avx512) return stage_avx512(0, src, dst, n, Rule{});
#endif
  bgr2hsv_scalar(src, dst, n);
}

void hsv2bgr_u8(const uint8_t* src, uint8_t* dst, int64_t n, const HsvRule& rule, ColorKernel kernel) {
  Y9_CHECK(n <= 0 || (src && dst), "hsv2bgr_u8: null pointer");
  check_kernel(kernel, "hsv2bgr_u8");
#if defined(Y9_COLOR_X86)
  if (kernel == ColorKernel::Avx2) return stage_avx2(1, src, dst, n, rule);
  if (kernel == ColorKernel::Avx512) return stage_avx512(1, src, dst, n, rule);
#endif
  hsv2bgr_scalar(src, dst, n, rule);
}

}  // namespace kernels::cpu
