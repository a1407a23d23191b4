// CUDA batched non_max_suppression (kernels/cuda/nms.cu through ops::non_max_suppression) against
// the CPU NMS (the twin, kernels/cpu/nms.cpp): the same rows bitwise (boxes, scores, classes,
// masks, order, counts) on the official nms fixtures of ../shared/reference (whole batch in one
// call) and on 20 random batches: empty images, images with every score below conf, multi_label
// on and off, a class filter, agnostic, many equal scores, more survivors than max_det, mask
// coefficients, strided and F64 predictions, the IoU mask in several image chunks (a small
// Y9_NMS_MASK_BUDGET). Under the emulator it also checks that a batch costs two device-to-host
// copies whatever its size (the candidate totals and the kept counts). detect's box mapping
// (ops::scale_boxes_round_) equals the CPU entry bitwise.
// Label gpu: skips without a device (fails with Y9_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "ops/nms.h"
#include "tests/eval/st_reader.h"
#include "tests/testutil.h"

#if defined(Y9_CUDA_EMULATOR)
#include "cuda_emu/device.h"
#endif

namespace {

using engine::Device;
using engine::DType;
using engine::Tensor;

/// Both devices' outputs, bitwise: same count of images, shapes, and float bit patterns.
void expect_same(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t b = 0; b < cpu.size(); ++b) {
    SCOPED_TRACE("image " + std::to_string(b));
    EXPECT_EQ(gpu[b].device(), Device::cuda(0));
    ASSERT_EQ(gpu[b].shape(), cpu[b].shape());
    const auto g = gpu[b].to(Device::cpu()).to_vector<float>(), c = cpu[b].to_vector<float>();
    ASSERT_EQ(g.size(), c.size());
    int bad = 0;
    for (size_t i = 0; i < c.size(); ++i)
      if (std::memcmp(&g[i], &c[i], sizeof(float)) != 0 && bad++ < 5)
        ADD_FAILURE() << "row " << i / cpu[b].size(1) << " column " << i % cpu[b].size(1) << ": cuda " << g[i]
                      << " cpu " << c[i];
    EXPECT_EQ(bad, 0);
  }
}

TEST(NmsCuda, FixturesMatchCpu) {
  Y9_SKIP_WITHOUT_GPU();
  auto files = testutil::glob_files(testutil::reference_dir(), "nms*.json");
  if (files.empty()) GTEST_SKIP() << "no nms*.json under " << testutil::reference_dir();
  int cases = 0;
  for (const auto& jf : files) {
    auto js = evaltest::read_json(jf);
    auto ts = evaltest::read_safetensors(testutil::reference_dir() + "/" + js["tensors_file"].get<std::string>());
    const Tensor pred = ts.at("prediction");
    const Tensor dpred = pred.to(Device::cuda(0));
    for (auto it = js["cases"].begin(); it != js["cases"].end(); ++it) {
      SCOPED_TRACE(jf + " case " + it.key());
      const auto& c = it.value();
      ops::NmsOptions opt;
      opt.conf_thres = c["conf_thres"].get<double>();
      opt.iou_thres = c["iou_thres"].get<double>();
      opt.multi_label = c["multi_label"].get<bool>();
      opt.max_det = c["max_det"].get<int64_t>();
      if (c.contains("agnostic")) opt.agnostic = c["agnostic"].get<bool>();
      if (c.contains("classes") && !c["classes"].is_null()) opt.classes = c["classes"].get<std::vector<int64_t>>();
      const auto cpu = ops::non_max_suppression(pred, opt);
      const auto gpu = ops::non_max_suppression(dpred, opt);  // the whole batch in one call
      expect_same(gpu, cpu);
      if (js.contains("counts"))
        for (size_t b = 0; b < gpu.size(); ++b) EXPECT_EQ(gpu[b].size(0), js["counts"][it.key()][b].get<int64_t>());
      ++cases;
    }
  }
  EXPECT_GT(cases, 0);
}

/// A random batch [B, 4 + nc + nm, A]: boxes clustered around a few hot spots (so suppression
/// happens), scores uniform in [0, 1) or (equal_scores) on a coarse grid of 8 values; image
/// `below` has every score below conf, and A = 0 gives empty images.
struct Case {
  int64_t batch, nc, nm, anchors;
  bool equal_scores;
  int64_t below;  // image whose scores are all < 0.05 (-1: none)
  ops::NmsOptions opt;
};

Tensor make_pred(const Case& k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  const int64_t rows = 4 + k.nc + k.nm;
  std::vector<float> v(static_cast<size_t>(k.batch * rows * k.anchors));
  for (int64_t b = 0; b < k.batch; ++b) {
    float hot[4][2];
    for (auto& h : hot) h[0] = 20 + 200 * u(rng), h[1] = 20 + 200 * u(rng);
    for (int64_t a = 0; a < k.anchors; ++a) {
      float* p = v.data() + b * rows * k.anchors + a;
      const auto& h = hot[rng() % 4];
      p[0] = h[0] + 12 * (u(rng) - 0.5f);
      p[k.anchors] = h[1] + 12 * (u(rng) - 0.5f);
      p[2 * k.anchors] = 8 + 30 * u(rng);
      p[3 * k.anchors] = 8 + 30 * u(rng);
      for (int64_t c = 0; c < k.nc; ++c) {
        float s = k.equal_scores ? static_cast<float>(rng() % 8) / 8.f + 0.0625f : u(rng);
        if (b == k.below) s *= 0.05f;
        p[(4 + c) * k.anchors] = s;
      }
      for (int64_t m = 0; m < k.nm; ++m) p[(4 + k.nc + m) * k.anchors] = u(rng) - 0.5f;
    }
  }
  return Tensor::from_vector<float>(v, {k.batch, rows, k.anchors});
}

std::vector<Case> random_cases() {
  std::vector<Case> cs;
  for (int i = 0; i < 20; ++i) {
    Case k{1 + i % 3, i % 5 == 0 ? 1 : 3 + i % 4, i % 4 == 3 ? 2 : 0, 40 + 37 * (i % 7), i % 3 == 1, -1, {}};
    k.opt.conf_thres = (i % 4 == 0) ? 0.001 : 0.25 + 0.05 * (i % 3);
    k.opt.iou_thres = 0.3 + 0.1 * (i % 5);
    k.opt.multi_label = i % 2 == 1;
    k.opt.nm = k.nm;
    if (i % 6 == 2) k.opt.classes = {0, 2, 7};
    if (i % 5 == 4) k.opt.agnostic = true;
    if (i % 7 == 3) k.opt.max_det = 3;           // more survivors than max_det
    if (i % 9 == 5) k.opt.max_nms = 17;          // truncation to the highest scores
    if (i % 4 == 2 && k.batch > 1) k.below = 1;  // an image with nothing above conf
    if (i == 7) k.anchors = 0;                   // empty images
    if (i == 19) k.anchors = 1100;               // > 2048 keys: sort steps across shared-memory tiles
    cs.push_back(k);
  }
  return cs;
}

TEST(NmsCuda, RandomBatchesMatchCpu) {
  Y9_SKIP_WITHOUT_GPU();
  const auto cs = random_cases();
  int64_t kept = 0, at_max_det = 0, empty = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    const Case& k = cs[i];
    SCOPED_TRACE("case " + std::to_string(i) + " batch " + std::to_string(k.batch) + " nc " + std::to_string(k.nc) +
                 " anchors " + std::to_string(k.anchors) + (k.opt.multi_label ? " multi_label" : "") +
                 (k.opt.agnostic ? " agnostic" : "") + (k.equal_scores ? " equal scores" : ""));
    Tensor pred = make_pred(k, 100 + i);
    const auto gpu = ops::non_max_suppression(pred.to(Device::cuda(0)), k.opt);
    expect_same(gpu, ops::non_max_suppression(pred, k.opt));
    for (const Tensor& t : gpu) {
      kept += t.size(0);
      at_max_det += t.size(0) == k.opt.max_det;
      empty += t.size(0) == 0;
    }
    if (i % 5 == 1) {  // a strided view, and the same values as F64 (converted to F32 on each device)
      Tensor strided = pred.transpose(1, 2).contiguous().transpose(1, 2);
      expect_same(ops::non_max_suppression(strided.to(Device::cuda(0)), k.opt),
                  ops::non_max_suppression(strided, k.opt));
      Tensor p64 = pred.to(DType::F64);
      expect_same(ops::non_max_suppression(p64.to(Device::cuda(0)), k.opt), ops::non_max_suppression(p64, k.opt));
    }
  }
  // The cases are not vacuous: rows kept, images cut at max_det, empty images.
  EXPECT_GT(kept, 200);
  EXPECT_GT(at_max_det, 0);
  EXPECT_GT(empty, 0);
}

TEST(NmsCuda, EdgeCases) {
  Y9_SKIP_WITHOUT_GPU();
  Case k{3, 4, 0, 50, true, 1, {}};
  Tensor pred = make_pred(k, 7);
  for (int64_t max_det : {0, 1, 1000}) {  // nothing kept, one kept, no limit reached
    ops::NmsOptions opt;
    opt.max_det = max_det;
    opt.multi_label = true;
    expect_same(ops::non_max_suppression(pred.to(Device::cuda(0)), opt), ops::non_max_suppression(pred, opt));
  }
  ops::NmsOptions opt;
  opt.conf_thres = 1.0;  // every score below conf
  const auto none = ops::non_max_suppression(pred.to(Device::cuda(0)), opt);
  for (const Tensor& t : none) EXPECT_EQ(t.shape(), (engine::Shape{0, 6}));
  // Identical boxes with identical scores: the first anchor survives (stable order), the rest go.
  std::vector<float> v;
  const int64_t a = 70;
  for (int r = 0; r < 4; ++r)
    for (int64_t j = 0; j < a; ++j) v.push_back(r < 2 ? 50.f : 10.f);
  for (int64_t j = 0; j < a; ++j) v.push_back(0.5f);
  Tensor same = Tensor::from_vector<float>(v, {1, 5, a});
  const auto g = ops::non_max_suppression(same.to(Device::cuda(0)), {});
  expect_same(g, ops::non_max_suppression(same, {}));
  EXPECT_EQ(g[0].size(0), 1);
  // --save-hybrid labels take the host path and still return device tensors.
  std::vector<Tensor> labels(3, Tensor());
  labels[0] = Tensor::from_vector<float>({1, 40, 40, 8, 8}, {1, 5});
  expect_same(ops::non_max_suppression(pred.to(Device::cuda(0)), {}, labels),
              ops::non_max_suppression(pred, {}, labels));
}

// A mask budget below one image's mask (Y9_NMS_MASK_BUDGET): the batch runs image by image in
// several mask + greedy launches, with the same rows.
TEST(NmsCuda, MaskInImageChunks) {
  Y9_SKIP_WITHOUT_GPU();
  Case k{5, 3, 1, 120, false, 2, {}};
  k.opt.nm = 1;
  k.opt.conf_thres = 0.1;
  Tensor pred = make_pred(k, 11);
  const auto cpu = ops::non_max_suppression(pred, k.opt);
  ::setenv("Y9_NMS_MASK_BUDGET", "1", 1);
  const auto gpu = ops::non_max_suppression(pred.to(Device::cuda(0)), k.opt);
  ::unsetenv("Y9_NMS_MASK_BUDGET");
  expect_same(gpu, cpu);
}

// detect's letterbox undo (ops::scale_boxes_round_, kernels::kScaleBoxes) on the device equals
// the CPU entry bitwise, and the CPU entry equals the formula written out here (double, clamp,
// FP32, round half to even): random boxes inside, outside and on the borders, coordinates that
// map to exact halves, NaN, extra columns left alone.
TEST(NmsCuda, ScaleBoxesMatchesCpu) {
  Y9_SKIP_WITHOUT_GPU();
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-80.f, 720.f);
  const int h0 = 427, w0 = 640, H = 448, W = 640;
  const double gain = std::min(static_cast<double>(H) / h0, static_cast<double>(W) / w0);
  const double pw = (W - w0 * gain) / 2, ph = (H - h0 * gain) / 2;
  const int64_t n = 300, cols = 7;
  std::vector<float> v(static_cast<size_t>(n * cols));
  for (auto& x : v) x = u(rng);
  v[0] = static_cast<float>(pw + 2.5 * gain);  // maps to 2.5 -> 2 (half to even)
  v[1] = static_cast<float>(ph + 3.5 * gain);  // 3.5 -> 4
  v[2] = std::nanf("");
  v[3] = 1e9f;
  const Tensor host = Tensor::from_vector(v, {n, cols});
  Tensor cpu = host.clone(), gpu = host.to(Device::cuda(0));
  ops::scale_boxes_round_(cpu, gain, pw, ph, h0, w0);
  ops::scale_boxes_round_(gpu, gain, pw, ph, h0, w0);
  EXPECT_EQ(gpu.device(), Device::cuda(0));
  const auto c = cpu.to_vector<float>(), g = gpu.to(Device::cpu()).to_vector<float>();
  ASSERT_EQ(c.size(), g.size());
  EXPECT_EQ(std::memcmp(c.data(), g.data(), c.size() * sizeof(float)), 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < cols; ++k) {
      const float in = v[static_cast<size_t>(i * cols + k)], out = c[static_cast<size_t>(i * cols + k)];
      if (k >= 4) {
        EXPECT_EQ(std::memcmp(&in, &out, sizeof in), 0) << "column " << k << " changed";
        continue;
      }
      if (std::isnan(in)) {
        EXPECT_TRUE(std::isnan(out));
        continue;
      }
      double d = (static_cast<double>(in) - (k % 2 == 0 ? pw : ph)) / gain;
      d = std::clamp(d, 0.0, static_cast<double>(k % 2 == 0 ? w0 : h0));
      EXPECT_EQ(out, std::nearbyint(static_cast<float>(d))) << "row " << i << " column " << k;
    }
  EXPECT_EQ(c[0], 2.f);
  EXPECT_EQ(c[1], 4.f);
  EXPECT_EQ(c[3], static_cast<float>(h0));
}

#if defined(Y9_CUDA_EMULATOR)
// One batch, one launch sequence: two device-to-host copies (the B candidate totals that size the
// sort, the B kept counts) whatever the batch size, never one per image.
TEST(NmsCuda, NoHostRoundTripPerImage) {
  Y9_SKIP_WITHOUT_GPU();
  for (int64_t batch : {1, 5}) {
    Case k{batch, 3, 0, 60, false, -1, {}};
    Tensor pred = make_pred(k, 9).to(Device::cuda(0));
    const uint64_t before = cuda_emu::device_to_host_copies();
    const auto out = ops::non_max_suppression(pred, k.opt);
    EXPECT_EQ(cuda_emu::device_to_host_copies() - before, 2u) << "batch " << batch;
    EXPECT_EQ(static_cast<int64_t>(out.size()), batch);
  }
}
#endif

}  // namespace
