// Google Benchmark: io::warp_affine_axis_aligned on the loader's shape (1280x1280 mosaic canvas ->
// 640x640, io::perspective_matrix with degrees = shear = perspective = 0) against cv::warpAffine
// single-threaded, timed in the same run. Counters: ref_ms, ours_ms, speedup (ref / ours).
#include <benchmark/benchmark.h>

#include <opencv2/core/utility.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <vector>

#include "io/augment.h"
#include "io/warp.h"

namespace {

using Clock = std::chrono::steady_clock;
using io::warp_detail::Path;

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const cv::Mat& canvas() {
  static const cv::Mat m = [] {
    cv::Mat c(1280, 1280, CV_8UC3);
    cv::RNG rng(42);
    rng.fill(c, cv::RNG::UNIFORM, 0, 256);
    cv::GaussianBlur(c, c, cv::Size(0, 0), 2.0);
    return c;
  }();
  return m;
}

// range(0): scale x 100; range(1): 0 = auto (AVX2 where available), 1 = scalar kernel.
void BM_WarpAffine(benchmark::State& st) {
  cv::setNumThreads(0);
  const double scale = st.range(0) / 100.0;
  const Path path = st.range(1) == 0 ? Path::Auto : Path::Scalar;
  io::PerspectiveParams p;
  p.scale = scale;
  p.tx_frac = 0.53;
  p.ty_frac = 0.46;
  const cv::Matx33d M3 = io::perspective_matrix(p, 1280, 1280, 640, 640);
  const cv::Matx23d M(M3(0, 0), M3(0, 1), M3(0, 2), M3(1, 0), M3(1, 1), M3(1, 2));
  const cv::Size ds(640, 640);
  const cv::Mat& src = canvas();
  if (!io::warp_self_check_passed()) st.SkipWithError("self-check failed");

  cv::Mat ref;
  std::vector<double> ref_t;
  for (int i = 0; i < 40; ++i) {
    const auto t0 = Clock::now();
    cv::warpAffine(src, ref, M, ds, cv::INTER_LINEAR, cv::BORDER_CONSTANT, cv::Scalar::all(114));
    ref_t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }

  cv::Mat dst;
  std::vector<double> ours_t;
  for (auto _ : st) {
    const auto t0 = Clock::now();
    io::warp_detail::warp_unchecked(src, dst, M, ds, 114, path);
    benchmark::DoNotOptimize(dst.data);
    ours_t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  if (cv::norm(dst, ref, cv::NORM_INF) != 0) st.SkipWithError("result differs from cv::warpAffine");
  const double ref_ms = median_ms(ref_t), ours_ms = median_ms(ours_t);
  st.counters["ref_ms"] = ref_ms;
  st.counters["ours_ms"] = ours_ms;
  st.counters["speedup"] = ref_ms / ours_ms;
}
BENCHMARK(BM_WarpAffine)
    ->ArgNames({"scale100", "scalar"})
    ->Args({30, 0})
    ->Args({100, 0})
    ->Args({170, 0})
    ->Args({30, 1})
    ->Args({100, 1})
    ->Args({170, 1})
    ->Unit(benchmark::kMillisecond);

void BM_SelfCheck(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(io::warp_detail::self_check_info().ms);
  st.counters["self_check_ms"] = io::warp_detail::self_check_info().ms;
}
BENCHMARK(BM_SelfCheck)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
