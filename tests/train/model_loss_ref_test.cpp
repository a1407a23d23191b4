// Whole training objective against the official fixtures: the model fixture's weights and input,
// our train-mode forward, our YOLOv9 loss on the loss fixture's targets, and backward through the
// whole network. Loss items and every parameter gradient the fixture records are compared.
// Runs every loss_*.json in $YOLOV9_REFERENCE (model from its "model_fixture").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/autograd.h"
#include "graph/model.h"
#include "graph/state.h"
#include "io/safetensors.h"
#include "ops/ops.h"
#include "ops/reduce.h"
#include "ops/yolo_loss.h"
#include "tests/graph/graph_ref_util.h"
#include "tests/testutil.h"

using engine::Tensor;

using graphtest::read_json;
using graphtest::scaled_error;

namespace {

/// Every loss fixture, with the model training in the plain NCHW layout or the CPU's blocked one
/// (the same tolerances).
void check_loss_fixtures(bool blocked) {
  const std::string ref = testutil::reference_dir();
  if (ref.empty()) GTEST_SKIP() << "no reference folder";
  graphtest::BlockedLayoutScope layout(std::nullopt, blocked);
  const int64_t blocked0 = graph::blocked_forwards();
  const auto files = testutil::glob_files(ref, "loss_*.json");
  ASSERT_FALSE(files.empty());
  for (const auto& lf : files) {
    SCOPED_TRACE(lf);
    const auto lj = read_json(lf);
    const auto lt = io::load_safetensors(ref + "/" + lj.at("tensors_file").get<std::string>()).tensors;
    const auto mj = read_json(ref + "/" + lj.at("model_fixture").get<std::string>() + ".json");
    auto fixture = graphtest::load_model_fixture(ref, mj);
    auto& model = fixture.model;
    const auto& mt = fixture.tensors;
    const int64_t nc = mj.at("nc").get<int64_t>();
    model->train();
    const auto initial = [&] {
      std::map<std::string, Tensor> st;
      for (const auto& [n, b] : model->named_buffers()) st[n] = b.detach().clone();
      return st;
    }();
    // Our own gradients for the input scaled by (1 + f): measures how much float rounding alone
    // moves each gradient (the conditioning of this fixture), to set per-tensor tolerances.
    auto grads_for = [&](double f) {
      {
        engine::autograd::NoGradGuard ng;
        for (auto [n, b] : model->named_buffers()) b.copy_(initial.at(n));
        for (const auto& [n, p] : model->named_parameters()) p.set_grad(Tensor());
      }
      Tensor x = mt.at("input").detach().clone();
      {
        engine::autograd::NoGradGuard ng;
        x.mul_(1.0 + f);
      }
      auto o = model->forward(x);
      ops::YoloLossConfig c = o.raw.size() == 2 ? ops::YoloLossConfig::dual(nc) : ops::YoloLossConfig::single(nc);
      ops::yolo_loss(o.raw, lt.at("targets"), c).total.backward();
      std::map<std::string, Tensor> g;
      for (const auto& [n, p] : model->named_parameters())
        if (p.grad().defined()) g[n] = p.grad().detach().clone();
      return g;
    };
    const auto g_up = grads_for(std::ldexp(1.0, -23));
    const auto g_down = grads_for(-std::ldexp(1.0, -23));
    {
      engine::autograd::NoGradGuard ng;
      for (auto [n, b] : model->named_buffers()) b.copy_(initial.at(n));
      for (const auto& [n, p] : model->named_parameters()) p.set_grad(Tensor());
    }

    auto out = model->forward(mt.at("input"));
    ops::YoloLossConfig lc = out.raw.size() == 2 ? ops::YoloLossConfig::dual(nc) : ops::YoloLossConfig::single(nc);
    auto loss = ops::yolo_loss(out.raw, lt.at("targets"), lc);
    for (size_t b = 0; b < loss.assign.size(); ++b)
      std::printf("  branch %zu fg %.0f\n", b, ops::sum(loss.assign[b].fg_mask.to(engine::DType::F32)).item<float>());

    // Loss items: the forward of a train-mode BN over 2x2 maps (P5 of a 64x64 input) amplifies
    // float rounding (graph/model_ref_test.cpp measures it); the loss averages over all anchors,
    // so 1e-3 relative holds with margin.
    auto items = loss.items.to_vector<double>();
    const char* names[3] = {"box", "cls", "dfl"};
    for (int k = 0; k < 3; ++k) {
      const double want = lj.at("loss_items").at(names[k]).get<double>();
      EXPECT_NEAR(items[k], want, 1e-3 * std::fabs(want)) << names[k];
      std::printf("  %s: ours %.7f official %.7f\n", names[k], items[k], want);
    }
    EXPECT_NEAR(loss.total.item<double>(), lj.at("loss_total").get<double>(), 1e-3 * lj.at("loss_total").get<double>());

    loss.total.backward();
    int compared = 0;
    double worst = 0;
    std::string worst_name;
    for (const auto& [name, p] : model->named_parameters()) {
      const std::string key = "grad." + name;
      if (!lt.count(key)) continue;
      ASSERT_TRUE(p.grad().defined()) << name << " got no gradient";
      // Tolerance: 1e-3 of the tensor's scale (fixture README: gradients summed over many terms
      // agree to ~1e-3 of scale), widened to 3x our own one-ulp-input noise. That noise is
      // large here (up to ~30% of scale in the backbone of yolov9-t): batch 1 at 64x64 leaves
      // 2x2 maps at P5, where train-mode BatchNorm normalises over 4 values and amplifies float
      // rounding in forward and backward alike (graph/model_ref_test.cpp measures the forward).
      // Why 3x: on a second fixture set (yolov9-t, nc=80, batch 2, 160 px) |ours - fixture| reaches
      // 2.2x the noise (up to 2.7e-3 of scale), and a float64 run of the official loss shows that
      // this is the fixture's own rounding: the official FP32 gradients are up to 1.9e-3 of scale
      // from the exact ones, ours up to 1.7e-3 (ours closer in 716 of 881 tensors).
      // A backward bug (wrong term, sign, missing path) moves gradients far beyond that noise.
      const double noise = std::max(scaled_error(g_up.at(name), p.grad()), scaled_error(g_down.at(name), p.grad()));
      const double tol = std::max(1e-3, 3.0 * noise);
      const double err = scaled_error(p.grad(), lt.at(key));
      if (err / tol > worst) {
        worst = err / tol;
        worst_name = key;
      }
      EXPECT_LE(err, tol) << key << " (noise " << noise << ")";
      if (std::getenv("Y9_VERBOSE")) std::printf("    %s err %.2e tol %.2e\n", key.c_str(), err, tol);
      ++compared;
    }
    std::printf("  %d gradients compared, worst error/tolerance %.2f (%s)\n", compared, worst, worst_name.c_str());
    EXPECT_GT(compared, 0);
  }
  EXPECT_EQ(graph::blocked_forwards() > blocked0, blocked);
}

}  // namespace

TEST(ModelLossRef, LossItemsAndParameterGradients) { check_loss_fixtures(false); }

// The same in the CPU's blocked layout (issue 15 item 1).
TEST(ModelLossRef, BlockedLossItemsAndParameterGradients) {
  if (ops::channel_block(engine::Device::cpu()) == 0) GTEST_SKIP() << "no blocked layout on this CPU";
  check_loss_fixtures(true);
}
