// The CUDA loss entries (kernels/cuda/box_loss.cu, yolo_loss.cu, tal.cu) against their CPU twins:
// the top-k port (kernels/common/topk.h) against the std algorithms torch calls, on tie-heavy
// rows (host only); tal_assign with ties in the top-k and an image without valid gts, equal to
// the CPU entry exactly (labels, fg, gt_idx) and to 1e-6 (scores, boxes) in F32; the full
// ops::yolo_loss (3-level head, 32x32 input, nc 3, batch 2) on CUDA vs the CPU: loss items and the
// gradient w.r.t. the head maps within 1e-5; yolo_loss_finish bitwise equal to its CPU twin; and,
// under the emulator, no device-to-host copy during the loss forward and backward. Label gpu:
// skips without a device (fails with Y9_REQUIRE_GPU=1); the emulator build runs it in both
// thread orders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/tensor.h"
#include "kernels/common/topk.h"
#include "kernels/common/yolo_loss.h"
#include "ops/tal.h"
#include "ops/yolo_loss.h"
#include "tests/testutil.h"

#if defined(Y9_CUDA_EMULATOR)
#include "cuda_emu/device.h"
#endif

namespace {

using engine::Device;
using engine::DType;
using engine::Tensor;

// The CPU twin's index set (kernels/cpu/tal.cpp topk_indices: torch's TopKImpl.h).
std::vector<int64_t> std_topk_set(const std::vector<double>& row, int64_t k) {
  using E = std::pair<double, int64_t>;
  std::vector<E> q(row.size());
  for (size_t j = 0; j < row.size(); ++j) q[j] = E(row[j], static_cast<int64_t>(j));
  auto cmp = [](const E& x, const E& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
  };
  const int64_t n = static_cast<int64_t>(row.size());
  if (k * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), cmp);
  } else {
    std::nth_element(q.begin(), q.begin() + k - 1, q.end(), cmp);
    std::sort(q.begin(), q.begin() + k - 1, cmp);
  }
  std::vector<int64_t> s;
  for (int64_t j = 0; j < k; ++j) s.push_back(q[j].second);
  std::sort(s.begin(), s.end());
  return s;
}

std::vector<int64_t> port_topk_set(const std::vector<double>& row, int64_t k) {
  std::vector<kernels::TopkPair> q(row.size());
  for (size_t j = 0; j < row.size(); ++j) q[j] = kernels::TopkPair{row[j], static_cast<int64_t>(j)};
  kernels::topk_select(q.data(), static_cast<int64_t>(q.size()), k);
  std::vector<int64_t> s;
  for (int64_t j = 0; j < k; ++j) s.push_back(q[j].i);
  std::sort(s.begin(), s.end());
  return s;
}

TEST(LossCuda, TopkPortSelectsTheStdSetWithTies) {
  std::mt19937_64 rng(11);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int checked = 0;
  for (int64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 25, 33, 64, 100, 640, 641, 1000, 2100, 8400})
    for (int64_t k : {1, 2, 3, 4, 10, 13})
      for (int pattern = 0; pattern < 4; ++pattern) {
        if (k > n) continue;
        std::vector<double> row(static_cast<size_t>(n));
        std::uniform_int_distribution<int> few(0, 3);
        std::uniform_real_distribution<double> u(0, 1);
        for (auto& v : row) {
          switch (pattern) {
            case 0: v = 0; break;                                 // all tied
            case 1: v = few(rng) * 0.25; break;                   // four values
            case 2: v = u(rng) < 0.8 ? 0.0 : u(rng); break;       // mostly zero (outside the gt)
            default: v = u(rng) < 0.05 ? nan : few(rng) * 0.5; break;  // NaN and ties
          }
        }
        EXPECT_EQ(port_topk_set(row, k), std_topk_set(row, k)) << "n " << n << " k " << k << " pattern " << pattern;
        ++checked;
      }
  EXPECT_GT(checked, 300);
}

Tensor f32(const std::vector<double>& v, const engine::Shape& s, Device d) {
  return Tensor::from_vector(v, s).to(DType::F32).to(d);
}

TEST(LossCuda, TalAssignEqualsCpuWithTiesAndAnEmptyImage) {
  Y9_SKIP_WITHOUT_GPU();
  // 3 images on an 8x8 grid at stride 8 (A = 64), M = 3 gts, nc 3.
  // Image 0: every anchor predicts the same box and scores, so the metric ties across each gt's
  // in-box anchors (the top-k picks among ties); image 1: random predictions; image 2: no valid gt.
  const int64_t B = 3, G = 8, A = G * G, M = 3, nc = 3;
  std::vector<double> anc;
  for (int y = 0; y < G; ++y)
    for (int x = 0; x < G; ++x) anc.insert(anc.end(), {8.0 * x + 4, 8.0 * y + 4});
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> ps(B * A * nc), pb(B * A * 4);
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t c = 0; c < nc; ++c) ps[(0 * A + a) * nc + c] = 0.5;
    const double box0[4] = {10, 12, 40, 44};
    for (int k = 0; k < 4; ++k) pb[(0 * A + a) * 4 + k] = box0[k];
    for (int64_t b = 1; b < B; ++b) {
      for (int64_t c = 0; c < nc; ++c) ps[(b * A + a) * nc + c] = 0.05 + 0.9 * u(rng);
      const double cx = anc[a * 2] + 8 * (u(rng) - 0.5), cy = anc[a * 2 + 1] + 8 * (u(rng) - 0.5);
      const double w = 6 + 20 * u(rng), h = 6 + 20 * u(rng);
      const double bx[4] = {cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2};
      for (int k = 0; k < 4; ++k) pb[(b * A + a) * 4 + k] = bx[k];
    }
  }
  const std::vector<double> gl = {0, 2, 1, /**/ 1, 0, 0, /**/ 2, 1, 0};
  const std::vector<double> gb = {2, 3, 45, 50, 20, 10, 60, 38, 0, 0, 0, 0,  //
                                  5, 20, 30, 60, 30, 4, 62, 30, 0, 0, 0, 0,  //
                                  5, 5, 30, 30, 10, 10, 50, 50, 0, 0, 0, 0};
  const std::vector<double> mg = {1, 1, 0, /**/ 1, 1, 0, /**/ 0, 0, 0};
  for (int64_t topk : {10, 1}) {  // nth_element (10 * 64 > 64) and partial_sort (64 <= 64) paths
    SCOPED_TRACE("topk " + std::to_string(topk));
    ops::TalConfig cfg;
    cfg.topk = topk;
    cfg.num_classes = nc;
    auto run = [&](Device d) {
      return ops::tal_assign(f32(ps, {B, A, nc}, d), f32(pb, {B, A, 4}, d), f32(anc, {A, 2}, d), f32(gl, {B, M, 1}, d),
                             f32(gb, {B, M, 4}, d), f32(mg, {B, M, 1}, d), cfg);
    };
    const ops::TalResult c = run(Device::cpu()), g = run(Device::cuda(0));
    const Device h = Device::cpu();
    EXPECT_EQ(g.target_labels.to(h).to_vector<int64_t>(), c.target_labels.to_vector<int64_t>());
    EXPECT_EQ(g.target_gt_idx.to(h).to_vector<int64_t>(), c.target_gt_idx.to_vector<int64_t>());
    const auto fg_c = c.fg_mask.to(DType::F64).to_vector<double>();
    EXPECT_EQ(g.fg_mask.to(h).to(DType::F64).to_vector<double>(), fg_c);
    // The case has what it claims: ties picked among in image 0, foreground in 0 and 1, none in 2.
    double fg0 = 0, fg1 = 0, fg2 = 0;
    for (int64_t a = 0; a < A; ++a) fg0 += fg_c[a], fg1 += fg_c[A + a], fg2 += fg_c[2 * A + a];
    EXPECT_GT(fg0, 0);
    EXPECT_GT(fg1, 0);
    EXPECT_EQ(fg2, 0);
    EXPECT_TRUE(testutil::all_close(g.target_scores.to(h).to(DType::F64), c.target_scores.to(DType::F64), 0, 1e-6));
    EXPECT_TRUE(testutil::all_close(g.target_bboxes.to(h).to(DType::F64), c.target_bboxes.to(DType::F64), 0, 1e-6));
  }
  // M == 0: the official empty result.
  {
    ops::TalConfig cfg;
    cfg.num_classes = nc;
    auto run = [&](Device d) {
      return ops::tal_assign(f32(ps, {B, A, nc}, d), f32(pb, {B, A, 4}, d), f32(anc, {A, 2}, d),
                             Tensor::empty({B, 0, 1}, DType::F32, d), Tensor::empty({B, 0, 4}, DType::F32, d),
                             Tensor::empty({B, 0, 1}, DType::F32, d), cfg);
    };
    const ops::TalResult c = run(Device::cpu()), g = run(Device::cuda(0));
    EXPECT_EQ(g.target_labels.to(Device::cpu()).to_vector<int64_t>(), c.target_labels.to_vector<int64_t>());
    EXPECT_TRUE(
        testutil::all_close(g.target_scores.to(Device::cpu()).to(DType::F64), c.target_scores.to(DType::F64), 0, 0));
  }
}

// Entries ops::yolo_loss runs on the maps' device (beyond the loss entries of this issue).
bool cuda_has_yolo_loss_path(std::string* missing) {
  const engine::Backend& b = engine::backend(engine::DeviceType::CUDA);
  for (const char* e : {"yolo_decode", "yolo_branch_loss_forward", "yolo_loss_finish", "yolo_branch_loss_backward",
                        "tal_assign", "copy_strided", "binary_forward"})
    if (!b.dtypes(e).has(DType::F32)) {
      *missing = e;
      return false;
    }
  return true;
}

TEST(LossCuda, YoloLossMatchesCpu) {
  Y9_SKIP_WITHOUT_GPU();
  std::string missing;
  if (!cuda_has_yolo_loss_path(&missing)) GTEST_SKIP() << "ops::yolo_loss needs '" << missing << "' on CUDA";
  // 32x32 input: levels 4x4, 2x2, 1x1 of 4 * 16 + 3 channels; batch 2 with 3 + 1 targets.
  const int64_t B = 2, no = 67;
  const std::vector<std::pair<int64_t, int64_t>> hw = {{4, 4}, {2, 2}, {1, 1}};
  std::vector<Tensor> maps64;
  for (size_t l = 0; l < hw.size(); ++l)
    maps64.push_back(testutil::random_tensor({B, no, hw[l].first, hw[l].second}, 40 + l, -2, 2, DType::F64));
  const Tensor targets = Tensor::from_vector<double>({0, 1, 0.5, 0.5, 0.5, 0.4,     //
                                                      0, 0, 0.25, 0.3, 0.3, 0.35,  //
                                                      0, 2, 0.7, 0.75, 0.4, 0.3,   //
                                                      1, 2, 0.4, 0.6, 0.6, 0.5},
                                                     {4, 6});
  auto run = [&](Device d, std::vector<Tensor>* grads) {
    std::vector<Tensor> x;
    for (const Tensor& m : maps64) {
      Tensor t = m.to(DType::F32).to(d).detach();
      t.set_requires_grad(true);
      x.push_back(t);
    }
    ops::YoloLossResult r = ops::yolo_loss({x}, targets, ops::YoloLossConfig::single(3));
    r.total.backward();
    for (const Tensor& t : x) grads->push_back(t.grad().to(Device::cpu()).to(DType::F64));
    return r.items.to(Device::cpu()).to(DType::F64);
  };
  std::vector<Tensor> gc, gg;
  const Tensor ic = run(Device::cpu(), &gc);
  const Tensor ig = run(Device::cuda(0), &gg);
  const auto vc = ic.to_vector<double>(), vg = ig.to_vector<double>();
  ASSERT_EQ(vc.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(vc[i], 0) << "item " << i;  // a real loss with foreground
    EXPECT_NEAR(vg[i], vc[i], 1e-5 * std::max(1.0, std::fabs(vc[i]))) << "item " << i;
  }
  ASSERT_EQ(gg.size(), gc.size());
  for (size_t l = 0; l < gc.size(); ++l)
    EXPECT_TRUE(testutil::all_close(gg[l], gc[l], 1e-5, 1e-5)) << "gradient of level " << l;
  // The device reduction is deterministic: a second run gives the same bits.
  std::vector<Tensor> gg2;
  const Tensor ig2 = run(Device::cuda(0), &gg2);
  EXPECT_TRUE(testutil::all_close(ig2, ig, 0, 0));
  for (size_t l = 0; l < gg.size(); ++l) EXPECT_TRUE(testutil::all_close(gg2[l], gg[l], 0, 0)) << "level " << l;
}

// The raw F64 sums of yolo_branch_loss_forward straight from the entries (no op around them), on
// a batch with several chunks per image (A = 2100 anchors: 640x640-like level sizes shrunk), CUDA
// vs CPU within 1e-6 relative (the device's expf/logf/atanf may differ from the host's by an ulp
// per term; the emulator uses the host libm and agrees to ~1e-15), and bitwise equal between two
// CUDA runs.
TEST(LossCuda, BranchLossSumsMatchCpuAndRepeat) {
  Y9_SKIP_WITHOUT_GPU();
  const int64_t B = 2, A = 2100, nc = 3;
  const int reg = 16;
  const int64_t no = 4 * reg + nc;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> pred(B * A * no), anc(A * 2), stride(A), tb(B * A * 4), ts(B * A * nc);
  std::vector<double> fgv(B * A);
  for (auto& v : pred) v = 4 * u(rng) - 2;
  for (int64_t a = 0; a < A; ++a) {
    anc[a * 2] = (a % 40) + 0.5;
    anc[a * 2 + 1] = (a / 40) + 0.5;
    stride[a] = 8;
  }
  for (int64_t i = 0; i < B * A; ++i) {
    const int64_t a = i % A;
    const double cx = anc[a * 2] * 8, cy = anc[a * 2 + 1] * 8, w = 8 + 40 * u(rng), h = 8 + 40 * u(rng);
    const double bx[4] = {cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2};
    for (int k = 0; k < 4; ++k) tb[i * 4 + k] = bx[k];
    fgv[i] = u(rng) < 0.1 ? 1 : 0;
    for (int64_t c = 0; c < nc; ++c) ts[i * nc + c] = fgv[i] > 0 && c == i % nc ? u(rng) : 0;
  }
  auto sums_on = [&](Device d) {
    const Tensor p = f32(pred, {B, A, no}, d), an = f32(anc, {A, 2}, d), st = f32(stride, {A}, d);
    const Tensor tbt = f32(tb, {B, A, 4}, d), tst = f32(ts, {B, A, nc}, d);
    const Tensor fg = Tensor::from_vector(fgv, {B, A}).to(DType::Bool).to(d);
    Tensor scores = Tensor::empty({B, A, nc}, DType::F32, d), bg = Tensor::empty({B, A, 4}, DType::F32, d),
           bp = Tensor::empty({B, A, 4}, DType::F32, d), sums = Tensor::empty({4}, DType::F64, d);
    auto kd = engine::kernel(kernels::kYoloDecode, DType::F32, d);
    kd.fn(kd.ctx, DType::F32, p.data_ptr(), an.data_ptr(), st.data_ptr(), B, A, nc, reg, scores.data_ptr(),
          bg.data_ptr(), bp.data_ptr());
    auto kf = engine::kernel(kernels::kYoloBranchLossForward, DType::F32, d);
    kf.fn(kf.ctx, DType::F32, p.data_ptr(), bg.data_ptr(), an.data_ptr(), st.data_ptr(), tbt.data_ptr(),
          tst.data_ptr(), fg.data<bool>(), B, A, nc, reg, sums.data<double>());
    return sums.to(Device::cpu()).to_vector<double>();
  };
  const auto c = sums_on(Device::cpu()), g = sums_on(Device::cuda(0)), g2 = sums_on(Device::cuda(0));
  for (int j = 0; j < 4; ++j) {
    EXPECT_GT(c[j], 0) << j;
    EXPECT_NEAR(g[j], c[j], 1e-6 * std::fabs(c[j])) << "sum " << j;
    EXPECT_EQ(g2[j], g[j]) << "sum " << j << " differs between two CUDA runs";
  }
}

// yolo_loss_finish (the loss items and target_scores_sum from the raw sums, on the device) equals
// its CPU twin bit for bit in F32 and F64: K = 1..3 branches, clamped and NaN ts sums, an inf sum.
TEST(LossCuda, LossFinishEqualsCpuBitwise) {
  Y9_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(29);
  std::uniform_real_distribution<double> u(0, 1);
  const double gains[3] = {7.5, 0.5, 1.5};
  for (DType dt : {DType::F32, DType::F64})
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t K = 1 + trial % 3;
      std::vector<double> bw, sv;
      for (int64_t k = 0; k < K; ++k) {
        bw.push_back(k == 0 && K > 1 ? 0.25 : 0.1 + u(rng));
        const double ts = trial % 4 == 0 ? 0.5 * u(rng) : 1 + 300 * u(rng);
        sv.insert(sv.end(), {trial == 5 ? std::numeric_limits<double>::quiet_NaN() : ts, 1e3 * u(rng),
                             trial == 6 ? INFINITY : 1e4 * u(rng), 1e2 * u(rng)});
      }
      const int64_t LB = 1 + trial;
      auto run = [&](Device d) {
        const Tensor sums = Tensor::from_vector(sv, {K, 4}).to(d);
        Tensor tss = Tensor::full({K}, -7.0, dt, d), out = Tensor::full({4}, -7.0, dt, d);
        auto k = engine::kernel(kernels::kYoloLossFinish, dt, d);
        k.fn(k.ctx, dt, sums.data<double>(), K, bw.data(), gains, LB, tss.data_ptr(), out.data_ptr());
        std::vector<double> v = tss.to(Device::cpu()).to(DType::F64).to_vector<double>();
        for (double x : out.to(Device::cpu()).to(DType::F64).to_vector<double>()) v.push_back(x);
        return v;
      };
      const auto c = run(Device::cpu()), g = run(Device::cuda(0));
      ASSERT_EQ(c.size(), g.size());
      for (size_t j = 0; j < c.size(); ++j)
        EXPECT_TRUE(c[j] == g[j] || (std::isnan(c[j]) && std::isnan(g[j])))
            << engine::dtype_name(dt) << " trial " << trial << " value " << j << ": cuda " << g[j] << " cpu " << c[j];
    }
}

#if defined(Y9_CUDA_EMULATOR)
// The loss never reads the device from the host: from the head maps (already on the device) and
// the host-side targets, ops::yolo_loss and its backward issue no device-to-host copy (the
// emulator counts them), and wait for the device only in the synchronous host-to-device copies
// of their host-side inputs; the results still equal the CPU's (a dual head, the official branch
// weights).
TEST(LossCuda, YoloLossForwardBackwardNeverReadTheDevice) {
  Y9_SKIP_WITHOUT_GPU();
  const int64_t B = 2, no = 67;
  const std::vector<std::pair<int64_t, int64_t>> hw = {{4, 4}, {2, 2}, {1, 1}};
  std::vector<Tensor> maps64;
  for (size_t l = 0; l < 2 * hw.size(); ++l) {
    const auto [h, w] = hw[l % hw.size()];
    maps64.push_back(testutil::random_tensor({B, no, h, w}, 60 + l, -2, 2, DType::F64));
  }
  const Tensor targets = Tensor::from_vector<double>({0, 1, 0.5, 0.5, 0.5, 0.4,     //
                                                      0, 0, 0.25, 0.3, 0.3, 0.35,  //
                                                      1, 2, 0.4, 0.6, 0.6, 0.5},
                                                     {3, 6});
  auto run = [&](Device d, uint64_t* d2h, uint64_t* syncs_out) {
    std::vector<Tensor> x;
    for (const Tensor& m : maps64) {
      Tensor t = m.to(DType::F32).to(d).detach();
      t.set_requires_grad(true);
      x.push_back(t);
    }
    const uint64_t before = cuda_emu::device_to_host_copies(), syncs = cuda_emu::host_synchronizations();
    ops::YoloLossResult r = ops::yolo_loss({{x[0], x[1], x[2]}, {x[3], x[4], x[5]}}, targets,
                                           ops::YoloLossConfig::dual(3));
    r.total.backward();
    *d2h = cuda_emu::device_to_host_copies() - before;
    *syncs_out = cuda_emu::host_synchronizations() - syncs;
    std::vector<double> v = r.items.to(Device::cpu()).to(DType::F64).to_vector<double>();
    v.push_back(r.total.to(Device::cpu()).to(DType::F64).item<double>());
    for (const Tensor& t : x)
      for (double g : t.grad().to(Device::cpu()).to(DType::F64).to_vector<double>()) v.push_back(g);
    return v;
  };
  uint64_t d2h_cpu = 0, d2h_cuda = 0, syncs_cpu = 0, syncs_cuda = 0;
  const auto c = run(Device::cpu(), &d2h_cpu, &syncs_cpu);
  const auto g = run(Device::cuda(0), &d2h_cuda, &syncs_cuda);
  EXPECT_EQ(d2h_cuda, 0u) << "device-to-host copies during yolo_loss forward + backward on cuda";
  // The remaining host waits are the engine's synchronous host-to-device copies of the host-side
  // inputs (anchor points, strides, gt labels, boxes, mask): none in the backward, none for a read.
  EXPECT_LE(syncs_cuda, 5u) << "host synchronisations during yolo_loss forward + backward on cuda";
  // The counter works: reading the loss afterwards is a device-to-host copy.
  const uint64_t before = cuda_emu::device_to_host_copies();
  (void)Tensor::ones({2}, DType::F32, Device::cuda(0)).to(Device::cpu());
  EXPECT_GT(cuda_emu::device_to_host_copies(), before);
  ASSERT_EQ(c.size(), g.size());
  for (int j = 0; j < 4; ++j) {
    EXPECT_GT(c[j], 0) << j;
    EXPECT_NEAR(g[j], c[j], 1e-5 * std::max(1.0, std::fabs(c[j]))) << "loss value " << j;
  }
  for (size_t j = 4; j < c.size(); ++j) ASSERT_NEAR(g[j], c[j], 1e-5 + 1e-5 * std::fabs(c[j])) << "gradient " << j;
}
#endif

}  // namespace
