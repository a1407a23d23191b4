// io::finish_to_planes: the cv::Mat entry of the fused augment_hsv + flipud + fliplr + HWC->RGB
// planes kernels (kernels/cpu/color.h), their OpenCV reference path, and the one-time exhaustive
// comparison with cv::cvtColor that decides whether the fast kernels are used (and measures the
// HsvModel they follow).
#include "io/color.h"

#include <opencv2/core/utility.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <atomic>
#include <limits>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "engine/error.h"
#include "io/augment.h"
#include "io/color_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")  // detect_simd_block's float probe, as the kernels
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace io {
namespace color_detail {
namespace {

using kernels::cpu::ColorKernel;
using Rule = kernels::cpu::HsvRule;
using Model = kernels::cpu::HsvModel;

std::string rule_name(const Rule& r) {
  std::string s = r.trunc ? "truncate" : "round-half-even";
  s += r.fma2 ? ", tab2 fused" : ", tab2 unfused";
  s += r.fma3 ? ", tab3 fused" : ", tab3 unfused";
  return s;
}

// ---------------------------------------------------------------------------------------------
// Verification against cv::cvtColor

using Variant = ColorKernel;

const char* variant_name(Variant v) {
  return v == Variant::Avx512 ? "avx512vbmi" : v == Variant::Avx2 ? "avx2" : "scalar";
}

void run_bgr2hsv(Variant var, const uint8_t* src, uint8_t* dst, int64_t n) {
  kernels::cpu::bgr2hsv_u8(src, dst, n, var);
}

void run_hsv2bgr(Variant var, const uint8_t* src, uint8_t* dst, int64_t n, const Rule& rule) {
  kernels::cpu::hsv2bgr_u8(src, dst, n, rule, var);
}

/// Compares `mine` with cv::cvtColor(code) on the `n` 3-byte inputs value(i), laid out as rows
/// of `width` pixels (the position in a row decides OpenCV's code path), in cache-sized chunks of
/// whole rows. Returns the first differing input index, or -1.
template <typename Value, typename Mine>
int64_t compare_domain(int64_t n, int width, int code, Value value, Mine mine, uint8_t first_bad[3]) {
  const int rows = std::max(1, 32768 / width);
  const int64_t chunk = int64_t{rows} * width, nchunks = (n + chunk - 1) / chunk;
  std::atomic<int64_t> first{std::numeric_limits<int64_t>::max()};
  // Chunks in parallel on OpenCV's pool (serial where it has one thread or inside its workers).
  cv::parallel_for_(cv::Range(0, static_cast<int>(nchunks)), [&](const cv::Range& range) {
    cv::Mat src(rows, width, CV_8UC3), ref(rows, width, CV_8UC3), out(rows, width, CV_8UC3);
    for (int c = range.start; c < range.end; ++c) {
      const int64_t start = c * chunk;
      if (start > first.load()) return;
      uint8_t* p = src.data;
      for (int64_t i = 0; i < chunk; ++i) value(std::min(start + i, n - 1), p + 3 * i);  // pad: repeat the last
      cv::cvtColor(src, ref, code);
      mine(src.data, out.data, chunk);
      if (std::memcmp(out.data, ref.data, static_cast<size_t>(3 * chunk)) == 0) continue;
      int64_t i = 0;
      while (std::memcmp(out.data + 3 * i, ref.data + 3 * i, 3) == 0) ++i;
      int64_t cur = first.load();
      while (start + i < cur && !first.compare_exchange_weak(cur, start + i)) {
      }
      return;
    }
  });
  if (first.load() == std::numeric_limits<int64_t>::max()) return -1;
  value(first.load(), first_bad);
  return first.load();
}

using Clock = std::chrono::steady_clock;

/// OpenCV's HSV2BGR SIMD block width: the first row width whose pixel 0 is truncated. Probe
/// value: hue 0, so b = tab1 = v*(1-s) (no FMA involved), with x = tab1*255 having a fraction in
/// [0.6, 0.9] (truncation and rounding differ by one whatever the FMA details). 0: no SIMD path.
int detect_simd_block() {
  auto value = [](int s, int v) {
    return static_cast<float>(v) * (1.0f / 255.0f) * (1.f - static_cast<float>(s) * (1.0f / 255.0f)) * 255.0f;
  };
  for (int s = 1; s < 256; ++s)
    for (int v = 1; v < 256; ++v) {
      const float x = value(s, v), frac = x - std::floor(x);
      if (!(frac > 0.6f && frac < 0.9f)) continue;
      for (int w = 1; w <= 256; ++w) {
        cv::Mat px(1, w, CV_8UC3, cv::Scalar(0, s, v)), out;
        cv::cvtColor(px, out, cv::COLOR_HSV2BGR);
        if (out.data[0] == static_cast<int>(x)) return w;
      }
      return 0;
    }
  return 0;
}

constexpr int kCore = 1;  ///< BGR2HSV, SIMD block width, HSV2BGR at SIMD-block positions
constexpr int kTail = 2;  ///< HSV2BGR at row-tail positions (needs the block width from kCore)

/// Exhaustive check of one kernel variant against cv::cvtColor, the `parts` given. With
/// `find_model` the SIMD block width is measured and the first matching rule candidate adopted;
/// otherwise `model` is checked. Returns an empty string on success, else the first mismatch.
std::string verify_variant(Variant var, Model& model, bool find_model, VerifyInfo& info, int parts) {
  const auto t0 = Clock::now();
  auto lap = [&, last = t0](const char* what) mutable {
    const auto now = Clock::now();
    info.steps += std::string(info.steps.empty() ? "" : ", ") + what + " " +
                  std::to_string(std::chrono::duration<double>(now - last).count()).substr(0, 5) + " s";
    last = now;
  };
  const std::string who = std::string(variant_name(var)) + " kernel: ";

  // 1. BGR2HSV on all 2^24 BGR values (width 4096: OpenCV's SIMD loop; its row tail runs the
  //    same integer code, covered by the unit tests at widths 1..70).
  uint8_t bad[3];
  auto at = [&](const char* what) {
    return who + what + " differs from cv::cvtColor at input (" + std::to_string(bad[0]) + ", " +
           std::to_string(bad[1]) + ", " + std::to_string(bad[2]) + ")";
  };
  auto bgr_value = [](int64_t i, uint8_t* p) {
    p[0] = static_cast<uint8_t>(i), p[1] = static_cast<uint8_t>(i >> 8), p[2] = static_cast<uint8_t>(i >> 16);
  };
  if ((parts & kCore) && compare_domain(int64_t{1} << 24, 4096, cv::COLOR_BGR2HSV, bgr_value,
                     [&](const uint8_t* src, uint8_t* dst, int64_t n) { run_bgr2hsv(var, src, dst, n); }, bad) >= 0)
    return at("BGR2HSV");
  if (parts & kCore) lap("BGR2HSV on 2^24 values");

  // 2. HSV2BGR on all 180*256*256 values at SIMD-block positions (width a multiple of the block)
  //    and at row-tail positions (width block-1, or any width without a SIMD path).
  if (find_model && (parts & kCore)) {
    model.simd_block = detect_simd_block();
    lap("block detection");
  }
  const int64_t n = int64_t{180} * 256 * 256;
  auto hsv_value = [](int64_t i, uint8_t* p) {
    p[0] = static_cast<uint8_t>(i >> 16), p[1] = static_cast<uint8_t>(i >> 8), p[2] = static_cast<uint8_t>(i);
  };
  auto check = [&](int width, std::vector<Rule> candidates, Rule& rule, const char* where) -> std::string {
    if (!find_model) candidates = {rule};
    for (const Rule& c : candidates) {
      auto mine = [&](const uint8_t* src, uint8_t* dst, int64_t k) { run_hsv2bgr(var, src, dst, k, c); };
      if (compare_domain(n, width, cv::COLOR_HSV2BGR, hsv_value, mine, bad) < 0) {
        rule = c;
        lap(where);
        return "";
      }
    }
    return at(where);  // the last candidate's first mismatch
  };
  const int bsz = model.simd_block;
  if (bsz > 0 && (parts & kCore)) {
    const std::string e = check(bsz * ((256 + bsz - 1) / bsz),
                                {{true, true, true}, {true, false, false}, {true, true, false}}, model.simd,
                                "HSV2BGR at SIMD-block positions");
    if (!e.empty()) return e;
  }
  if (!(parts & kTail)) return "";
  return check(bsz > 1 ? bsz - 1 : 256, {{false, true, false}, {false, false, false}, {false, true, true}},
               model.tail, "HSV2BGR at row-tail positions");
}

struct State {
  VerifyInfo info;
  Model model;
  std::once_flag core_once, tail_once;
  bool core_ok = false, tail_ok = false;
};

State& state() {
  static State s;
  return s;
}

Variant primary_variant() { return kernels::cpu::best_color_kernel(); }

/// One part of the one-time check of the variant finish_to_planes dispatches to on this CPU. The
/// row-tail part runs only when needed (a row width not a multiple of OpenCV's block: never for
/// 640-wide mosaics) or when the whole verification is asked for.
void verify_part(State& st, int part) {
  const auto t0 = Clock::now();
  VerifyInfo& info = st.info;
  const std::string msg = verify_variant(primary_variant(), st.model, true, info, part);
  (part == kCore ? st.core_ok : st.tail_ok) = msg.empty();
  if (info.message.empty()) info.message = msg;
  info.avx2_cpu = kernels::cpu::cpu_has_avx2_fma();
  info.variant = variant_name(primary_variant());
  info.simd_block = st.model.simd_block;
  info.simd_rule = st.model.simd_block > 0 ? rule_name(st.model.simd) : "(no SIMD path)";
  if (part == kTail) info.tail_rule = rule_name(st.model.tail);
  info.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  if (!msg.empty())
    std::fprintf(stderr, "warning: io::finish_to_planes: fast HSV %s; using the OpenCV reference path\n", msg.c_str());
}

/// The state after the parts needed for a row width (`width` < 0: every part).
const State& verified_state(int64_t width) {
  State& st = state();
  std::call_once(st.core_once, [&] { verify_part(st, kCore); });
  if (width < 0 || (st.core_ok && st.model.nsimd(width) < width))
    std::call_once(st.tail_once, [&] {
      verify_part(st, kTail);
      st.info.ok = st.core_ok && st.tail_ok;
    });
  return st;
}

void check_args(const cv::Mat& bgr, const uint8_t* r, const uint8_t* g, const uint8_t* b) {
  Y9_CHECK_SHAPE(!bgr.empty() && bgr.type() == CV_8UC3 && bgr.dims == 2,
                 "finish_to_planes: expected a non-empty H x W x 3 uint8 (CV_8UC3) image, got type ", bgr.type(),
                 " size ", bgr.rows, "x", bgr.cols);
  Y9_CHECK(r && g && b, "finish_to_planes: null plane pointer");
}

void reference(const cv::Mat& bgr, const PixelOps& ops, uint8_t* dst_r, uint8_t* dst_g, uint8_t* dst_b) {
  cv::Mat img = bgr.clone();
  if (ops.hsv) apply_hsv(img, ops.gh, ops.gs, ops.gv);
  if (ops.flipud) cv::flip(img, img, 0);
  if (ops.fliplr) cv::flip(img, img, 1);
  std::vector<cv::Mat> planes{cv::Mat(img.rows, img.cols, CV_8UC1, dst_b), cv::Mat(img.rows, img.cols, CV_8UC1, dst_g),
                              cv::Mat(img.rows, img.cols, CV_8UC1, dst_r)};
  cv::split(img, planes);  // writes into the given buffers (same size and type)
}

}  // namespace

const VerifyInfo& verify_info() { return verified_state(-1).info; }

kernels::cpu::HsvModel verified_model() { return verified_state(-1).model; }

namespace {
/// The kernel variant of an explicit Path (not Auto / Reference); throws when this CPU lacks it.
Variant explicit_variant(Path path, const char* who) {
  if (path == Path::Avx2) Y9_CHECK(kernels::cpu::cpu_has_avx2_fma(), who, ": this CPU has no AVX2+FMA");
  if (path == Path::Avx512)
    Y9_CHECK(kernels::cpu::cpu_has_avx512vbmi(), who, ": this CPU has no AVX-512 F/BW/VL/VBMI");
  return path == Path::Avx512 ? Variant::Avx512 : path == Path::Avx2 ? Variant::Avx2 : Variant::Scalar;
}
}  // namespace

VerifyInfo verify_now(Path variant) {
  Y9_CHECK(variant == Path::Scalar || variant == Path::Avx2 || variant == Path::Avx512,
           "verify_now: pass Path::Scalar, Path::Avx2 or Path::Avx512");
  const Variant var = explicit_variant(variant, "verify_now");
  const auto t0 = Clock::now();
  VerifyInfo info;
  Model model;
  info.avx2_cpu = kernels::cpu::cpu_has_avx2_fma();
  info.variant = variant_name(var);
  info.message = verify_variant(var, model, true, info, kCore | kTail);
  info.ok = info.message.empty();
  info.simd_block = model.simd_block;
  info.simd_rule = model.simd_block > 0 ? rule_name(model.simd) : "(no SIMD path)";
  info.tail_rule = rule_name(model.tail);
  info.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return info;
}

void finish_to_planes(const cv::Mat& bgr, const PixelOps& ops, uint8_t* dst_r, uint8_t* dst_g, uint8_t* dst_b,
                      Path path) {
  check_args(bgr, dst_r, dst_g, dst_b);
  if (path == Path::Reference) return reference(bgr, ops, dst_r, dst_g, dst_b);
  // Without AVX2 the portable kernel is slower than OpenCV's own SSE code (6.2 vs 2.6 ms at
  // 640x640): Auto then takes the reference path; the scalar kernel stays verified and testable.
  if (path == Path::Auto && !kernels::cpu::cpu_has_avx2_fma()) return reference(bgr, ops, dst_r, dst_g, dst_b);
  const Variant var = path == Path::Auto ? primary_variant() : explicit_variant(path, "finish_to_planes");
  // The flips and the deinterleave are exact byte moves; only the HSV math needs the verification.
  const State& st = ops.hsv ? verified_state(bgr.cols) : state();
  const bool need_tail = st.model.nsimd(bgr.cols) < bgr.cols;
  if (path == Path::Auto && ops.hsv && !(st.core_ok && (st.tail_ok || !need_tail)))
    return reference(bgr, ops, dst_r, dst_g, dst_b);
  kernels::cpu::finish_to_planes_u8(bgr.data, bgr.rows, bgr.cols, static_cast<int64_t>(bgr.step[0]), ops, st.model,
                                    var, dst_r, dst_g, dst_b);
}

}  // namespace color_detail

void finish_to_planes(const cv::Mat& bgr, const PixelOps& ops, uint8_t* dst_r, uint8_t* dst_g, uint8_t* dst_b) {
  color_detail::finish_to_planes(bgr, ops, dst_r, dst_g, dst_b, color_detail::Path::Auto);
}

bool fast_hsv_verified() { return color_detail::verify_info().ok; }

}  // namespace io
