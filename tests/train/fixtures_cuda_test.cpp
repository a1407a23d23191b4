// The official fixtures on the CUDA device (label gpu; under the CUDA emulator it runs as
// fixtures_cuda_test_emu_fwd/_emu_rev, ~1-2 min per order): the model and loss fixtures of
// ../shared/reference (testutil::reference_dir(); skipped without it) with the model moved to
// cuda:0 by graph::Module::to. tests/graph/model_ref_test.cpp and tests/train/model_loss_ref_test.cpp
// check the same fixtures on the CPU; tests/train/step_cuda_test.cpp checks the optimizer and EMA
// update on CUDA against the CPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "engine/autograd.h"
#include "graph/model.h"
#include "graph/state.h"
#include "io/safetensors.h"
#include "ops/yolo_loss.h"
#include "tests/graph/graph_ref_util.h"
#include "tests/testutil.h"

using engine::Device;
using engine::DType;
using engine::Tensor;

namespace {

// cuDNN convolutions in strict FP32 (no TF32 tensor cores, which PyTorch and we allow by default):
// the fixtures are the official FP32 results. On the H200 this test passed twice and then failed
// with the loss items 1-3% off and gradients up to 60x their tolerance, most likely TF32:
// cuDNN's algorithm search (our cudnn.benchmark) picks by timing, so whether a TF32 tensor-op
// algorithm wins varies from run to run, and the same build's strict-FP32 step_cuda_test gave the
// loss bits of the build before. Set before the first convolution: the backend reads the
// variable once; Y9_CUDNN_NO_TF32=0 in the environment wins.
[[maybe_unused]] const bool kStrictFp32 = [] {
  return ::setenv("Y9_CUDNN_NO_TF32", "1", /*overwrite=*/0) == 0;
}();

// graphtest::scaled_error on host copies of both tensors.
double scaled_error(const Tensor& got, const Tensor& want) {
  return graphtest::scaled_error(got.to(Device::cpu()), want.to(Device::cpu()));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// The official fixtures on the CUDA device (issue 11): for every loss_*.json in the reference
// folder, its model fixture (official weights and input) moved to cuda:0 by Module::to: the eval
// forward (raw maps and decoded outputs, tests/graph/model_ref_test.cpp's 1e-4 + 1e-6-of-scale
// bound), then the train-mode forward, the official loss and backward: loss items (1e-3
// relative) and every fixture gradient (tests/train/model_loss_ref_test.cpp's tolerance, its
// one-ulp-input noise measured on the CPU), and num_batches_tracked after the train forward.
TEST(FixturesCuda, OfficialLossAndModelFixturesOnCuda) {
  Y9_SKIP_WITHOUT_GPU();
  const std::string ref = testutil::reference_dir();
  if (ref.empty()) GTEST_SKIP() << "no reference folder";
  const auto files = testutil::glob_files(ref, "loss_*.json");
  ASSERT_FALSE(files.empty());
  for (const auto& lf : files) {
    SCOPED_TRACE(lf);
    const auto t0 = std::chrono::steady_clock::now();
    const auto lj = graphtest::read_json(lf);
    const auto lt = io::load_safetensors(ref + "/" + lj.at("tensors_file").get<std::string>()).tensors;
    const auto mj = graphtest::read_json(ref + "/" + lj.at("model_fixture").get<std::string>() + ".json");
    const int64_t nc = mj.at("nc").get<int64_t>();
    const Tensor targets = lt.at("targets");
    // CPU: the one-ulp-input gradient noise (as model_loss_ref_test.cpp) and the reference run.
    auto cpu_grads = [&](double f) {
      auto fx = graphtest::load_model_fixture(ref, mj);
      fx.model->train();
      Tensor x = fx.tensors.at("input").detach().clone();
      {
        engine::autograd::NoGradGuard ng;
        x.mul_(1.0 + f);
      }
      auto o = fx.model->forward(x);
      ops::YoloLossConfig c = o.raw.size() == 2 ? ops::YoloLossConfig::dual(nc) : ops::YoloLossConfig::single(nc);
      ops::yolo_loss(o.raw, targets, c).total.backward();
      std::map<std::string, Tensor> g;
      for (const auto& [n, p] : fx.model->named_parameters())
        if (p.grad().defined()) g[n] = p.grad().detach().clone();
      return g;
    };
    const auto g_cpu = cpu_grads(0.0);
    const auto g_up = cpu_grads(std::ldexp(1.0, -23)), g_down = cpu_grads(-std::ldexp(1.0, -23));

    auto fixture = graphtest::load_model_fixture(ref, mj);
    auto& m = fixture.model;
    const auto& fx = fixture.tensors;
    ASSERT_GT(m->to(Device::cuda(0)), 0);
    const Tensor input = fx.at("input").to(Device::cuda(0));
    const auto raw_key = [&](const std::string& base, size_t b, size_t l) {
      return m->head()->branches == 1 ? base + "." + std::to_string(l)
                                      : base + "." + std::to_string(b) + "." + std::to_string(l);
    };
    // Eval forward.
    m->eval();
    {
      engine::autograd::NoGradGuard ng;
      auto out = m->forward(input);
      ASSERT_EQ(out.decoded.size(), out.raw.size());
      for (size_t b = 0; b < out.raw.size(); ++b) {
        for (size_t l = 0; l < out.raw[b].size(); ++l) {
          const std::string k = raw_key("eval.raw", b, l);
          ASSERT_EQ(out.raw[b][l].device(), Device::cuda(0));
          EXPECT_TRUE(graphtest::close(out.raw[b][l].to(Device::cpu()), fx.at(k), 1e-4, 1e-6)) << k;
        }
        const std::string dk = out.decoded.size() == 1 ? "eval.decoded" : "eval.decoded." + std::to_string(b);
        EXPECT_TRUE(graphtest::close(out.decoded[b].to(Device::cpu()), fx.at(dk), 1e-4, 1e-6)) << dk;
      }
    }
    // Train forward, loss, backward.
    m->train();
    auto out = m->forward(input);
    ops::YoloLossConfig lc = out.raw.size() == 2 ? ops::YoloLossConfig::dual(nc) : ops::YoloLossConfig::single(nc);
    auto loss = ops::yolo_loss(out.raw, targets, lc);
    loss.total.backward();
    const auto items = loss.items.to(Device::cpu()).to(DType::F64).to_vector<double>();
    const char* names[3] = {"box", "cls", "dfl"};
    for (int k = 0; k < 3; ++k) {
      const double want = lj.at("loss_items").at(names[k]).get<double>();
      EXPECT_NEAR(items[k], want, 1e-3 * std::fabs(want)) << names[k];
      std::printf("  %s: cuda %.7f official %.7f\n", names[k], items[k], want);
    }
    EXPECT_NEAR(loss.total.to(Device::cpu()).to(DType::F64).item<double>(), lj.at("loss_total").get<double>(),
                1e-3 * lj.at("loss_total").get<double>());
    int compared = 0;
    double worst = 0, worst_cpu = 0;
    std::string worst_name;
    for (const auto& [name, p] : m->named_parameters()) {
      const std::string key = "grad." + name;
      if (!lt.count(key)) continue;
      ASSERT_TRUE(p.grad().defined()) << name << " got no gradient";
      ASSERT_EQ(p.grad().device(), Device::cuda(0)) << name;
      const Tensor g = p.grad().to(Device::cpu());
      const double noise = std::max(scaled_error(g_up.at(name), g_cpu.at(name)), scaled_error(g_down.at(name), g_cpu.at(name)));
      const double tol = std::max(1e-3, 3.0 * noise);
      const double err = scaled_error(g, lt.at(key));
      if (err / tol > worst) worst = err / tol, worst_name = key;
      worst_cpu = std::max(worst_cpu, scaled_error(g, g_cpu.at(name)) / tol);
      EXPECT_LE(err, tol) << key << " (noise " << noise << ")";
      ++compared;
    }
    for (const auto& [name, t] : m->named_buffers())
      if (t.dtype() == DType::I64)
        EXPECT_TRUE(graphtest::close(t.to(Device::cpu()), fx.at("bn_after_train." + name), 0, 0)) << name;
    std::printf("  %s: %d gradients vs the fixture, worst error/tolerance %.2f (%s); vs our CPU %.2f; %.1f s\n",
                lf.c_str(), compared, worst, worst_name.c_str(), worst_cpu, seconds_since(t0));
    EXPECT_GT(compared, 0);
  }
}
