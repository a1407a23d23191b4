// Google Benchmark: io::finish_to_planes (fused augment_hsv + flips + RGB planes) on a 640x640
// mosaic-sized image, single thread, against the OpenCV path it replaces (io::apply_hsv +
// cv::flip + cv::split) and the AVX2 kernel, both timed in the same run. Counters: ref_ms,
// avx2_ms, ours_ms, speedup (ref/ours), vs_avx2 (avx2/ours).
#include <benchmark/benchmark.h>

#include <opencv2/core/utility.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <vector>

#include "io/augment.h"
#include "io/color.h"
#include "io/color_internal.h"
#include "kernels/cpu/color.h"

namespace {

using io::color_detail::Path;
using Clock = std::chrono::steady_clock;

cv::Mat natural_image(int h, int w) {
  cv::Mat m(h, w, CV_8UC3);
  cv::RNG rng(42);
  rng.fill(m, cv::RNG::UNIFORM, 0, 256);
  cv::GaussianBlur(m, m, cv::Size(0, 0), 3.0);
  return m;
}

/// The replaced code: in-place apply_hsv on the sample, flips, split into the batch planes.
void reference_pass(cv::Mat& work, const io::PixelOps& ops, std::vector<cv::Mat>& planes) {
  if (ops.hsv) io::apply_hsv(work, ops.gh, ops.gs, ops.gv);
  if (ops.flipud) cv::flip(work, work, 0);
  if (ops.fliplr) cv::flip(work, work, 1);
  cv::split(work, planes);
}

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median of 30 timed calls of `fn`.
template <typename Fn>
double time_ms(Fn fn) {
  std::vector<double> v;
  for (int i = 0; i < 30; ++i) {
    const auto t0 = Clock::now();
    fn();
    v.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return median_ms(v);
}

// range(0): kernel, 0 = auto (AVX-512 VBMI, else AVX2), 1 = scalar, 2 = AVX2, 3 = AVX-512 VBMI;
// range(1): hsv on/off.
void BM_FinishToPlanes(benchmark::State& st) {
  cv::setNumThreads(0);
  const int h = 640, w = 640;
  const Path kPaths[] = {Path::Auto, Path::Scalar, Path::Avx2, Path::Avx512};
  const Path path = kPaths[st.range(0)];
  if ((path == Path::Avx2 && !kernels::cpu::cpu_has_avx2_fma()) ||
      (path == Path::Avx512 && !kernels::cpu::cpu_has_avx512vbmi())) {
    st.SkipWithError("this CPU lacks the kernel's instruction set");
    return;
  }
  io::PixelOps ops;
  ops.hsv = st.range(1) != 0;
  ops.gh = 1.007, ops.gs = 0.62, ops.gv = 1.18, ops.fliplr = true;
  const cv::Mat src = natural_image(h, w);
  std::vector<uint8_t> out(3 * size_t(h) * w);
  uint8_t *r = out.data(), *g = r + size_t(h) * w, *b = g + size_t(h) * w;
  io::fast_hsv_verified();  // one-time verification outside the timing

  // Reference, same run: median of 30 passes (the copy that restores the input is not timed).
  std::vector<cv::Mat> planes{cv::Mat(h, w, CV_8UC1, b), cv::Mat(h, w, CV_8UC1, g), cv::Mat(h, w, CV_8UC1, r)};
  cv::Mat work;
  std::vector<double> ref;
  for (int i = 0; i < 30; ++i) {
    src.copyTo(work);
    const auto t0 = Clock::now();
    reference_pass(work, ops, planes);
    ref.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  // The AVX2 kernel, same run (0 without AVX2).
  const double avx2_ms = kernels::cpu::cpu_has_avx2_fma() ? time_ms([&] {
    io::color_detail::finish_to_planes(src, ops, r, g, b, Path::Avx2);
    benchmark::DoNotOptimize(out.data());
  }) : 0.0;

  std::vector<double> ours;
  for (auto _ : st) {
    const auto t0 = Clock::now();
    io::color_detail::finish_to_planes(src, ops, r, g, b, path);
    benchmark::DoNotOptimize(out.data());
    ours.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double ref_ms = median_ms(ref), ours_ms = median_ms(ours);
  st.counters["ref_ms"] = ref_ms;
  st.counters["avx2_ms"] = avx2_ms;
  st.counters["ours_ms"] = ours_ms;
  st.counters["speedup"] = ref_ms / ours_ms;
  st.counters["vs_avx2"] = avx2_ms / ours_ms;
  st.counters["Mpx/s"] = benchmark::Counter(double(h) * w, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FinishToPlanes)
    ->ArgNames({"kernel", "hsv"})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({2, 1})
    ->Args({3, 1})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({2, 0})
    ->Args({3, 0})
    ->Unit(benchmark::kMillisecond);

void BM_Verification(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(io::color_detail::verify_info().seconds);
  st.counters["verify_s"] = io::color_detail::verify_info().seconds;
}
BENCHMARK(BM_Verification)->Iterations(1);

// A fresh exhaustive verification of one variant (range(0) as in BM_FinishToPlanes: 1, 2, 3).
void BM_VerifyVariant(benchmark::State& st) {
  const Path kPaths[] = {Path::Auto, Path::Scalar, Path::Avx2, Path::Avx512};
  const Path path = kPaths[st.range(0)];
  if ((path == Path::Avx2 && !kernels::cpu::cpu_has_avx2_fma()) ||
      (path == Path::Avx512 && !kernels::cpu::cpu_has_avx512vbmi())) {
    st.SkipWithError("this CPU lacks the kernel's instruction set");
    return;
  }
  double s = 0;
  for (auto _ : st) s = io::color_detail::verify_now(path).seconds;
  st.counters["verify_s"] = s;
}
BENCHMARK(BM_VerifyVariant)->ArgName("kernel")->Arg(1)->Arg(2)->Arg(3)->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
