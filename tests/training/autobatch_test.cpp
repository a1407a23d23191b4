// AutoBatch and the memory advice on the CPU (issue 11, "Memory"): the official fit on numbers
// (utils/autobatch.py: the line through the profiled sizes, 80% of the free memory, the prior
// safe point after a failed size, the default 16 on an anomaly), the CPU fallback with the
// official message on a real model (the model untouched), the --batch checks (-1, 0, < -1, the
// DDP rule), the progress line's CPU column and the out-of-memory --batch suggestion.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "apps/training/autobatch.h"
#include "engine/error.h"
#include "graph/model.h"
#include "tests/testutil.h"

namespace {

using training::AutoBatchSample;

AutoBatchSample ok(int64_t b, double gib) {
  AutoBatchSample s;
  s.batch = b;
  s.ok = true;
  s.reserved_gib = gib;
  return s;
}
AutoBatchSample failed(int64_t b) {
  AutoBatchSample s;
  s.batch = b;
  s.error = "cuda:0 out of memory";
  s.out_of_memory = true;
  return s;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const engine::Error& e) {
    return e.message();
  }
  return "";
}

}  // namespace

TEST(AutoBatchFit, OfficialLineAndFraction) {
  // y = 0.5 + 0.25 b GiB exactly; 24 GiB device, 0.5 reserved + 0.25 allocated: free = 23.25,
  // b = int((23.25 * 0.8 - 0.5) / 0.25) = int(72.4) = 72.
  std::vector<AutoBatchSample> s;
  for (int64_t b : {1, 2, 4, 8, 16}) s.push_back(ok(b, 0.5 + 0.25 * static_cast<double>(b)));
  const auto fit = training::autobatch_fit(s, 24.0, 0.5, 0.25);
  EXPECT_NEAR(fit.slope_gib, 0.25, 1e-12);
  EXPECT_NEAR(fit.intercept_gib, 0.5, 1e-12);
  EXPECT_EQ(fit.batch, 72);
  EXPECT_FALSE(fit.anomaly);
  // (0.25 * 72 + 0.5 + 0.5 + 0.25) / 24 = 0.802...
  EXPECT_NEAR(fit.predicted_fraction, (0.25 * 72 + 1.25) / 24.0, 1e-12);
  EXPECT_GE(fit.predicted_fraction, 0.6);
  EXPECT_LE(fit.predicted_fraction, 0.9);
  // Another fraction.
  EXPECT_EQ(training::autobatch_fit(s, 24.0, 0.5, 0.25, 0.5).batch, 44);  // (11.625 - 0.5) / 0.25 = 44.5
}

TEST(AutoBatchFit, LeastSquaresOnNoisyPoints) {
  // Points around y = 1 + 0.1 b: least squares as np.polyfit(deg=1).
  std::vector<AutoBatchSample> s = {ok(1, 1.12), ok(2, 1.18), ok(4, 1.41), ok(8, 1.79), ok(16, 2.61)};
  const auto fit = training::autobatch_fit(s, 16.0, 0.0, 0.0);
  // numpy.polyfit([1,2,4,8,16],[1.12,1.18,1.41,1.79,2.61],1) = [0.09999..., 1.0137...]
  EXPECT_NEAR(fit.slope_gib, 0.1, 2e-3);
  EXPECT_NEAR(fit.intercept_gib, 1.01, 1e-2);
  const int64_t want = static_cast<int64_t>((16.0 * 0.8 - fit.intercept_gib) / fit.slope_gib);
  EXPECT_EQ(fit.batch, want);
}

TEST(AutoBatchFit, FailedSizeGivesPriorSafePoint) {
  // 16 failed and the fit reaches it: the size before it (official "select prior safe point").
  std::vector<AutoBatchSample> s = {ok(1, 1.25), ok(2, 1.5), ok(4, 2.0), ok(8, 3.0), failed(16)};
  auto fit = training::autobatch_fit(s, 8.0, 0.0, 0.0);
  EXPECT_EQ(fit.batch, 8);
  EXPECT_FALSE(fit.anomaly);
  // Batch 1 ran, 2 failed: a line through the origin (int(6.4 / 3) = 2 reaches 2): 1.
  s = {ok(1, 3.0), failed(2), failed(4), failed(8), failed(16)};
  fit = training::autobatch_fit(s, 8.0, 0.0, 0.0);
  EXPECT_EQ(fit.batch, 1);
  // A fit below the failure point stays.
  s = {ok(1, 1.0), ok(2, 2.0), ok(4, 4.0), failed(8), failed(16)};
  fit = training::autobatch_fit(s, 8.0, 0.0, 0.0);  // y = b: b = int(6.4) = 6 < 8
  EXPECT_EQ(fit.batch, 6);
}

TEST(AutoBatchFit, AnomalyFallsBackToDefault) {
  // Memory falling with the batch (no positive slope): the default 16, anomaly.
  std::vector<AutoBatchSample> s = {ok(1, 3.0), ok(2, 2.0), ok(4, 1.0)};
  auto fit = training::autobatch_fit(s, 8.0, 0.0, 0.0);
  EXPECT_TRUE(fit.anomaly);
  EXPECT_EQ(fit.batch, 16);
  // A fit far above the safe range (> 1024).
  s = {ok(1, 0.001), ok(2, 0.002), ok(4, 0.004)};
  fit = training::autobatch_fit(s, 80.0, 0.0, 0.0);
  EXPECT_TRUE(fit.anomaly);
  EXPECT_EQ(fit.batch, 16);
  // The intercept alone exceeds 80% of the free memory: b < 1.
  s = {ok(1, 7.0), ok(2, 7.1)};
  fit = training::autobatch_fit(s, 8.0, 0.0, 0.0, 0.8, 32);
  EXPECT_TRUE(fit.anomaly);
  EXPECT_EQ(fit.batch, 32);
}

TEST(AutoBatchFit, NothingRanIsAClearError) {
  const std::vector<AutoBatchSample> s = {failed(1), failed(2)};
  const std::string m = message_of([&] { training::autobatch_fit(s, 8.0, 0.0, 0.0); });
  EXPECT_NE(m.find("not even batch 1 fits"), std::string::npos) << m;
  EXPECT_NE(m.find("lower --img"), std::string::npos) << m;
}

// A first size that failed for another reason than memory (official `except Exception`: e.g. a
// shape cuDNN refuses) is named as a failed profile, not as "does not fit".
TEST(AutoBatchFit, NothingRanForAnotherReasonSaysSo) {
  AutoBatchSample first = failed(1);
  first.out_of_memory = false;
  first.error = "cuDNN error 3000: CUDNN_STATUS_NOT_SUPPORTED in conv2d forward";
  const std::vector<AutoBatchSample> s = {first, failed(2)};
  const std::string m = message_of([&] { training::autobatch_fit(s, 8.0, 0.0, 0.0); });
  EXPECT_NE(m.find("the profile of batch 1 failed: cuDNN error 3000"), std::string::npos) << m;
  EXPECT_EQ(m.find("fits"), std::string::npos) << m;
}

TEST(AutoBatch, CpuFallbackPrintsOfficialMessageAndKeepsModel) {
  graph::BuildOptions bo;
  bo.seed = 3;
  auto m = graph::Model::from_yaml(std::string(Y9_SOURCE_DIR) + "/configs/models/yolov9-t.yaml", 80, bo);
  const auto before = m->state_dict();
  testing::internal::CaptureStdout();
  const auto r = training::autobatch(*m, training::parameters_device(*m), 64);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(r.batch, 16);
  EXPECT_TRUE(r.samples.empty());
  EXPECT_EQ(out,
            "AutoBatch: Computing optimal batch size for --imgsz 64\n"
            "AutoBatch: CUDA not detected, using default CPU batch-size 16\n");
  const auto after = m->state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].second.impl(), before[i].second.impl());
}

TEST(AutoBatch, BatchSizeChecks) {
  EXPECT_NO_THROW(training::check_batch_size(-1, 4096, 1));
  EXPECT_NO_THROW(training::check_batch_size(1, 4096, 1));
  EXPECT_NO_THROW(training::check_batch_size(4096, 4096, 2));
  for (int64_t b : {0LL, -2LL, -16LL, 4097LL}) {
    const std::string m = message_of([&] { training::check_batch_size(b, 4096, 1); });
    EXPECT_NE(m.find("--batch-size must be -1 (AutoBatch) or in 1..4096 (got " + std::to_string(b) + ")"),
              std::string::npos)
        << m;
  }
  // Official DDP assertion.
  const std::string m = message_of([&] { training::check_batch_size(-1, 4096, 2); });
  EXPECT_EQ(m,
            "AutoBatch with --batch-size -1 is not compatible with YOLO Multi-GPU DDP training, please pass a valid "
            "--batch-size");
}

TEST(AutoBatch, CpuProgressColumn) {
  const auto c = training::progress_mem_column(engine::Device::cpu());
  EXPECT_STREQ(c.header, "CPU_mem");
  ASSERT_FALSE(c.value.empty());
  EXPECT_EQ(c.value.back(), 'G');
}

TEST(OomAdvice, SuggestBatchFromPeakPerImage) {
  constexpr int64_t GiB = int64_t(1) << 30;
  // 16 images peaked at 40 GiB (2.5 GiB each) on an 80 GiB device: 80 * 0.8 / 2.5 = 25.6 -> but
  // 16 failed, so at most 15.
  EXPECT_EQ(training::suggest_batch(40 * GiB, 16, 80 * GiB), 15);
  // 64 images peaked at 64 GiB (1 GiB each) on 24 GiB: floor(19.2) = 19.
  EXPECT_EQ(training::suggest_batch(64 * GiB, 64, 24 * GiB), 19);
  // 32 images, 30 GiB on a 16 GiB device: 0.9375 GiB each, floor(12.8 / 0.9375) = 13.
  EXPECT_EQ(training::suggest_batch(30 * GiB, 32, 16 * GiB), 13);
  // Per image above 80% of the device: 1 (the smallest batch to try).
  EXPECT_EQ(training::suggest_batch(100 * GiB, 4, 16 * GiB), 1);
  // Batch 1 failed: nothing fits.
  EXPECT_EQ(training::suggest_batch(20 * GiB, 1, 16 * GiB), 0);
  EXPECT_EQ(training::suggest_batch(0, 8, 16 * GiB), 0);
  EXPECT_EQ(training::suggest_batch(GiB, 8, 0), 0);
  // Other fraction.
  EXPECT_EQ(training::suggest_batch(64 * GiB, 64, 24 * GiB, 0.5), 12);
}

TEST(OomAdvice, SentenceNamesTheNumbers) {
  constexpr int64_t GiB = int64_t(1) << 30;
  EXPECT_EQ(training::oom_batch_advice(64 * GiB, 64, 24 * GiB),
            "try --batch 19 (measured peak 64.00 GiB for batch 64, 1024.0 MiB per image; device total 24.00 GiB)");
  EXPECT_EQ(training::oom_batch_advice(20 * GiB, 1, 16 * GiB),
            "batch 1 does not fit: lower --img (measured peak 20.00 GiB for batch 1, 20480.0 MiB per image; device "
            "total 16.00 GiB)");
  // No device advice on the CPU: the error stays as it was.
  EXPECT_EQ(training::oom_batch_advice(engine::Device::cpu(), 16), "");
  const engine::OutOfMemoryError e("cuda:0 out of memory", "raw_alloc", "f.cpp", 7);
  EXPECT_EQ(training::with_batch_advice(e, engine::Device::cpu(), 16).message(), "cuda:0 out of memory");
}
