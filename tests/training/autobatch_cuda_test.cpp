// AutoBatch on cuda:0 (issue 11, "Memory"; label gpu, under the CUDA emulator it runs in both
// thread orders): yolov9-t at 64 px profiled at batch 1 and 2 with the caching allocator's
// statistics, and a size so large that its input cannot be allocated (the official "failed size"
// path: the out-of-memory error is printed, the size marked failed, profiling goes on), on a
// device total given by the test so the choice follows from the measured memory alone (4x the
// memory held after a first profile, which leaves the cuDNN algorithm searches and their shared
// workspace behind it, plus 512 MiB; on the H200 that workspace made batch 1 look larger than 2):
// the official line through the two points at 80% of the free memory; a second profile of batch 1
// measures the same bytes. Also the official log
// lines, the model left as it was (BatchNorm statistics bitwise, no gradients), the GPU_mem
// progress column and the out-of-memory advice on the device, added to a real out-of-memory error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "apps/training/autobatch.h"
#include "engine/allocator.h"
#include "graph/model.h"
#include "tests/source_paths.h"
#include "tests/testutil.h"

using engine::Device;
using engine::Tensor;

namespace {
/// f() with stdout captured into `out`; the capture ends even when f throws (else the rest of the
/// test binary's output, its failure report included, would go into the capture: on the H200 the
/// test ended with status 1 and no message).
template <typename F>
auto captured(std::string& out, F&& f) {
  testing::internal::CaptureStdout();
  try {
    auto r = f();
    out = testing::internal::GetCapturedStdout();
    return r;
  } catch (...) {
    out = testing::internal::GetCapturedStdout();
    std::printf("%s", out.c_str());
    throw;
  }
}
}  // namespace

TEST(CudaAutoBatch, ProfilesFitsAndLeavesTheModel) {
  Y9_SKIP_WITHOUT_GPU();
  graph::BuildOptions bo;
  bo.seed = 5;
  auto m = graph::Model::from_yaml(testutil::source_file("configs/models/yolov9-t.yaml"), 80, bo);
  m->train();
  ASSERT_GT(m->to(Device::cuda(0)), 0);
  ASSERT_EQ(training::parameters_device(*m), Device::cuda(0));
  std::map<std::string, Tensor> buffers;
  for (const auto& [n, t] : m->named_buffers()) buffers[n] = t.to(Device::cpu()).clone();

  // [2^23, 3, 64, 64] F32 = 384 GiB: never allocatable (2^20 was, on the H200's 139 GiB, and
  // cuDNN then refused the 2^31-element tensor).
  constexpr int64_t kHuge = int64_t(1) << 23;
  training::AutoBatchOptions opt;
  // A first profile, one run per size: every cuDNN algorithm search of batch 1 and 2 and the
  // workspace's growth.
  opt.batch_sizes = {1, 2};
  opt.runs = 1;
  {
    std::string warm;
    captured(warm, [&] { return training::autobatch(*m, Device::cuda(0), 64, opt); });
  }
  opt.runs = 2;  // the first run of each size is not measured, the second is (official 3)
  const engine::AllocatorStats held = engine::allocator_for(Device::cuda(0))->stats();
  const int64_t kTotal = 4 * (held.live_bytes + held.cached_bytes) + (int64_t(512) << 20);
  const double total_gib = static_cast<double>(kTotal) / double(int64_t(1) << 30);
  opt.batch_sizes = {1, 2, kHuge};
  opt.total_bytes_override = kTotal;
  std::string out;
  const training::AutoBatchResult r = captured(out, [&] { return training::autobatch(*m, Device::cuda(0), 64, opt); });
  std::printf("%s", out.c_str());

  // The measurements.
  ASSERT_EQ(r.samples.size(), 3u);
  const auto &s1 = r.samples[0], &s2 = r.samples[1], &sh = r.samples[2];
  ASSERT_TRUE(s1.ok) << s1.error;
  ASSERT_TRUE(s2.ok) << s2.error;
  EXPECT_FALSE(sh.ok);
  EXPECT_NE(sh.error.find("out of memory"), std::string::npos) << sh.error;
  EXPECT_GT(s1.reserved_gib, 0.0);
  EXPECT_GT(s2.reserved_gib, s1.reserved_gib);  // a larger batch needs more memory
  EXPECT_GT(s1.peak_gib, 0.0);
  EXPECT_LE(s1.peak_gib, s1.reserved_gib);
  EXPECT_LE(s2.peak_gib, s2.reserved_gib);
  EXPECT_DOUBLE_EQ(r.total_gib, total_gib);
  EXPECT_NEAR(r.free_gib, r.total_gib - (r.reserved_gib + r.allocated_gib), 1e-12);

  // The choice: the line through the two points at 80% of the free memory (below the failed size).
  const double slope = s2.reserved_gib - s1.reserved_gib, intercept = s1.reserved_gib - slope;
  const int64_t want = static_cast<int64_t>((r.free_gib * 0.8 - intercept) / slope);
  ASSERT_GE(want, 2) << "512 MiB more must hold more than batch 2 of yolov9-t at 64 px";
  ASSERT_LE(want, training::kAutoBatchMax);
  EXPECT_FALSE(r.fit.anomaly);
  EXPECT_EQ(r.batch, want);
  EXPECT_NEAR(r.fit.slope_gib, slope, 1e-9);
  EXPECT_NEAR(r.fit.intercept_gib, intercept, 1e-9);
  EXPECT_GT(r.fit.predicted_fraction, 0.6);
  // At most 80% of the official free memory t - (r + a) plus r + a.
  EXPECT_LE(r.fit.predicted_fraction, 0.8 + 0.2 * (r.reserved_gib + r.allocated_gib) / r.total_gib + 1e-9);

  // The official lines.
  EXPECT_NE(out.find("AutoBatch: Computing optimal batch size for --imgsz 64\n"), std::string::npos) << out;
  EXPECT_NE(out.find("AutoBatch: CUDA:0 ("), std::string::npos) << out;
  char total_s[32];
  std::snprintf(total_s, sizeof total_s, ") %.2fG total, ", total_gib);
  EXPECT_NE(out.find(total_s), std::string::npos) << out;
  EXPECT_NE(out.find("G reserved, "), std::string::npos) << out;
  EXPECT_NE(out.find("      Params      GFLOPs  GPU_mem (GB)  forward (ms) backward (ms)"), std::string::npos) << out;
  EXPECT_NE(out.find("(1, 3, 64, 64)"), std::string::npos) << out;
  EXPECT_NE(out.find("(2, 3, 64, 64)"), std::string::npos) << out;
  char using_line[128];
  std::snprintf(using_line, sizeof using_line, "AutoBatch: Using batch-size %lld for CUDA:0 %.2fG/%.2fG (%.0f%%) ✅\n",
                (long long)want, total_gib * r.fit.predicted_fraction, total_gib, 100.0 * r.fit.predicted_fraction);
  EXPECT_NE(out.find(using_line), std::string::npos) << using_line << "\n" << out;
  EXPECT_EQ(out.find("anomaly"), std::string::npos) << out;

  // Deterministic: a second profile measures the same memory (the choice may differ: the memory
  // held before profiling is not the same, official f = t - (r + a)).
  opt.batch_sizes = {1};
  std::string out_again;
  const training::AutoBatchResult again =
      captured(out_again, [&] { return training::autobatch(*m, Device::cuda(0), 64, opt); });
  ASSERT_EQ(again.samples.size(), 1u);
  EXPECT_EQ(again.samples[0].reserved_gib, s1.reserved_gib);
  EXPECT_EQ(again.samples[0].peak_gib, s1.peak_gib);

  // The model as before: the BatchNorm statistics bitwise, no gradients.
  for (const auto& [n, t] : m->named_buffers()) {
    const Tensor now = t.to(Device::cpu());
    const Tensor& was = buffers.at(n);
    ASSERT_EQ(now.numel(), was.numel()) << n;
    EXPECT_EQ(std::memcmp(now.contiguous().data_ptr(), was.contiguous().data_ptr(),
                          static_cast<size_t>(now.numel()) * engine::dtype_size(now.dtype())),
              0)
        << n;
  }
  for (const auto& [n, p] : m->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
  EXPECT_TRUE(m->training());

  // The progress column: reserved bytes in GB (official torch.cuda.memory_reserved() / 1E9).
  const auto col = training::progress_mem_column(Device::cuda(0));
  EXPECT_STREQ(col.header, "GPU_mem");
  const engine::AllocatorStats st = engine::allocator_for(Device::cuda(0))->stats();
  char want_col[32];
  std::snprintf(want_col, sizeof want_col, "%.3gG", static_cast<double>(st.live_bytes + st.cached_bytes) / 1e9);
  EXPECT_EQ(col.value, want_col);

  // The out-of-memory advice names the device's numbers (the emulator reports 16 GiB).
  const std::string advice = training::oom_batch_advice(Device::cuda(0), 8);
  EXPECT_NE(advice.find("try --batch 7 ("), std::string::npos) << advice;
  EXPECT_NE(advice.find("for batch 8, "), std::string::npos) << advice;
  EXPECT_NE(advice.find("device total "), std::string::npos) << advice;

  // A real out-of-memory error of the device gets the advice (Trainer::run).
  try {
    (void)Tensor::zeros({kHuge, 3, 64, 64}, engine::DType::F32, Device::cuda(0));
    ADD_FAILURE() << "a 384 GiB tensor must not fit the device";
  } catch (const engine::OutOfMemoryError& e) {
    const engine::OutOfMemoryError more = training::with_batch_advice(e, Device::cuda(0), 8);
    EXPECT_EQ(more.message().rfind(e.message(), 0), 0u) << more.message();
    EXPECT_NE(more.message().find(". Lower --batch (or --img) to need less memory. Estimate: try --batch 7 (measured "
                                  "peak "),
              std::string::npos)
        << more.message();
    EXPECT_EQ(more.line(), e.line());
  }
}
