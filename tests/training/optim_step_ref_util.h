// One official train_dual.py optimizer iteration (step_*.json fixtures): from the model
// fixture's initial state, the loss fixture's gradients and the model fixture's BN statistics
// after the train-mode forward, run clip_grad_norm_(10) -> SGD(nesterov, 3 official groups, flat
// parameter and gradient buffers of a ParamStore in registration order) -> ModelEMA.update (flat
// buffers of the parameters and the BatchNorm statistics), with the warm-up / LambdaLR settings
// of each variant, and compare parameters, momentum buffers and EMA with the fixture.
// The forward pass and the loss are NOT run here (they have their own fixture tests); the
// gradients are the loss fixture's grad.* (the step fixture documents that they are the same).
// Shared by tests/training/optim_step_ref_test.cpp (CPU) and optim_step_ref_cuda_test.cpp (the
// same iteration with every parameter, gradient, buffer, optimizer and EMA state on cuda:0).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "apps/training/clip.h"
#include "apps/training/ema.h"
#include "apps/training/optim.h"
#include "apps/training/param_groups.h"
#include "apps/training/param_store.h"
#include "apps/training/schedule.h"
#include "engine/flat_params.h"
#include "graph/model.h"
#include "io/safetensors.h"
#include "tests/source_paths.h"
#include "tests/testutil.h"

namespace optim_step_ref {

using training::NamedTensors;
using engine::Tensor;
using nlohmann::json;


constexpr double kTol = 1e-6;  // the brief's acceptance bound (absolute, FP32 values of O(1))

inline std::vector<std::string> fixtures() { return testutil::glob_files(testutil::reference_dir(), "step_*.json"); }

inline json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

inline std::string strip_prefix(const std::string& s, const std::string& pre) {
  return s.rfind(pre, 0) == 0 ? s.substr(pre.size()) : std::string();
}

// Both tensors read on the host (either may live on a device).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to(engine::Device::cpu()).to_vector<double>(), y = b.to(engine::Device::cpu()).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  return a.to(engine::Device::cpu()).to_vector<double>() == b.to(engine::Device::cpu()).to_vector<double>();
}


/// Runs every step_*.json fixture with the parameters, gradients, BatchNorm buffers, optimizer
/// and EMA on `dev` (Device::cpu() or a CUDA device; the caller checks that it is usable).
/// Reports through gtest assertions; returns without checks when there are no fixtures (the
/// caller skips).
inline void run_all_fixtures(engine::Device dev) {
  const auto files = fixtures();
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    const json J = read_json(path);
    const std::string dir = std::filesystem::path(path).parent_path().string();
    const json MJ = read_json(dir + "/" + J.at("model_fixture").get<std::string>() + ".json");
    const json LJ = read_json(dir + "/" + J.at("loss_fixture").get<std::string>() + ".json");
    const auto M = io::load_safetensors(dir + "/" + MJ.at("tensors_file").get<std::string>()).tensors;
    const auto L = io::load_safetensors(dir + "/" + LJ.at("tensors_file").get<std::string>()).tensors;
    const auto S = io::load_safetensors(dir + "/" + J.at("tensors_file").get<std::string>()).tensors;
    const json& hyp = LJ.at("hyp");
    const double lr0 = hyp.at("lr0"), momentum = hyp.at("momentum");
    const int64_t bs = J.at("batch_size_for_decay"), nbs = J.value("nbs", 64);
    const int64_t accumulate = J.at("accumulate"), nw = J.at("nw");
    EXPECT_EQ(training::official_accumulate(bs, nbs), accumulate);
    const double decay = training::official_weight_decay(hyp.at("weight_decay").get<double>(), bs, accumulate, nbs);
    training::WarmupHyp wh;
    wh.warmup_epochs = hyp.at("warmup_epochs");
    wh.warmup_momentum = hyp.at("warmup_momentum");
    wh.warmup_bias_lr = hyp.at("warmup_bias_lr");
    wh.momentum = momentum;
    wh.nbs = nbs;

    // The model graph gives the official parameter order and the Norm-layer test.
    const std::string cfg = std::filesystem::path(MJ.at("cfg").get<std::string>()).filename().string();
    graph::BuildOptions bo;
    bo.init = false;
    auto model = graph::Model::from_yaml(testutil::source_file("configs/models/" + cfg), MJ.at("nc"), bo);
    const NamedTensors model_params = model->named_parameters();
    const NamedTensors model_state = model->state_dict();
    const training::OfficialParamSplit names_split = training::official_param_split(*model);

    // --- group membership: our split vs the fixture's lists (names and order) -------------------
    int64_t n_member_lists = 0;
    for (const auto& [vname, V] : J.at("variants").items()) {
      if (!V.contains("param_group_members")) continue;
      ++n_member_lists;
      const json& mem = V.at("param_group_members");
      std::vector<const NamedTensors*> ours = {&names_split.bias, &names_split.decay, &names_split.norm};
      std::vector<std::string> keys;
      for (const auto& [k, v] : mem.items()) keys.push_back(k);
      ASSERT_EQ(keys.size(), 3u);
      // json objects iterate sorted: group0_..., group1_..., group2_...
      for (size_t gi = 0; gi < 3; ++gi) {
        const auto& want = mem.at(keys[gi]);
        ASSERT_EQ(ours[gi]->size(), want.size()) << keys[gi];
        for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ((*ours[gi])[k].first, want[k].get<std::string>());
      }
    }
    EXPECT_GT(n_member_lists, 0);

    for (const auto& [vname, V] : J.at("variants").items()) {
      SCOPED_TRACE(vname);
      // --- fresh parameters from the initial state, in a ParamStore (registration order) ----------
      std::map<std::string, Tensor> P;  // name -> parameter
      NamedTensors ordered;
      for (const auto& [n, t] : model_params) {
        Tensor p = M.at("state." + n).clone().to(dev);
        const bool has_grad = L.count("grad." + n) > 0;
        EXPECT_EQ(has_grad, t.requires_grad()) << n;  // frozen DFL weights have no gradient
        if (has_grad) p.set_requires_grad(true);
        P[n] = p;
        ordered.emplace_back(n, p);
      }
      training::ParamStore store(ordered);
      EXPECT_EQ(store.params().flat.device(), dev);
      training::OfficialParamSplit split;
      for (auto [src, dst] : {std::pair{&names_split.bias, &split.bias}, std::pair{&names_split.decay, &split.decay},
                              std::pair{&names_split.norm, &split.norm}})
        for (const auto& [n, t] : *src) dst->emplace_back(n, P.at(n));
      for (const auto& [n, p] : ordered)
        if (p.requires_grad()) Tensor(p.grad()).copy_(L.at("grad." + n).to(dev));

      // Buffers from the initial state: floating ones packed flat (the EMA blends flat buffers).
      std::map<std::string, Tensor> B;
      NamedTensors float_buffers, state;
      for (const auto& [n, t] : model_state) {
        if (P.count(n)) {
          state.emplace_back(n, P.at(n));
          continue;
        }
        Tensor b = M.at("state." + n).clone().to(dev);
        B[n] = b;
        state.emplace_back(n, b);
        if (engine::is_floating(b.dtype())) float_buffers.emplace_back(n, b);
      }
      const engine::FlatBuffer fbuf = engine::pack_flat(float_buffers);
      // EMA from the initial state (before the iteration), all state_dict entries.
      training::ModelEMA ema({store.params(), fbuf}, state);

      // --- optimizer and lr/momentum of the variant ---------------------------------------------
      auto opt = training::make_official_optimizer(training::OptimizerKind::SGD, store, split, lr0, momentum, decay);
      const int64_t epochs = J.value("epochs", 100);
      training::LambdaLR sched(*opt, training::make_lr_lambda(training::LrScheduleKind::Linear, hyp.at("lrf"), epochs));
      sched.set_last_epoch(-1);
      const int64_t ni = V.at("ni");
      if (ni <= nw) training::apply_warmup(*opt, ni, nw, sched.lf(0), wh, bs);
      const json& PG = V.at("param_groups");
      ASSERT_EQ(PG.size(), opt->param_groups().size());
      for (size_t gi = 0; gi < PG.size(); ++gi) {
        const auto& g = opt->param_groups()[gi];
        EXPECT_NEAR(g.lr, PG[gi].at("lr").get<double>(), 1e-15) << "group " << gi;
        EXPECT_NEAR(g.momentum, PG[gi].at("momentum").get<double>(), 1e-15) << "group " << gi;
        EXPECT_NEAR(g.weight_decay, PG[gi].at("weight_decay").get<double>(), 1e-18) << "group " << gi;
        EXPECT_EQ(g.nesterov, PG[gi].at("nesterov").get<bool>()) << "group " << gi;
        EXPECT_EQ(static_cast<int64_t>(g.params.size()), PG[gi].at("n_tensors").get<int64_t>()) << "group " << gi;
      }

      // --- clip, step, EMA ------------------------------------------------------------------------
      const double norm = training::clip_grad_norm_(store, J.at("variants").at(vname).at("clip_max_norm").get<double>());
      const double want_norm = V.at("grad_norm_before_clip");
      EXPECT_NEAR(norm, want_norm, 1e-6 * want_norm);
      std::printf("[%s] grad norm before clip: ours %.9g, official %.9g (rel diff %.3g)\n", vname.c_str(), norm,
                  want_norm, std::fabs(norm - want_norm) / want_norm);
      opt->step();
      opt->zero_grad();

      NamedTensors after;  // model state after the iteration: stepped params + BN stats after forward
      for (const auto& [n, t] : model_state) {
        if (P.count(n)) {
          after.emplace_back(n, P.at(n));
        } else if (engine::is_floating(B.at(n).dtype())) {
          B.at(n).detach().copy_(M.at("bn_after_train." + n).to(dev));  // in the flat buffer the EMA reads
          after.emplace_back(n, B.at(n));
        } else {
          after.emplace_back(n, M.at("bn_after_train." + n));
        }
      }
      const double d = ema.update();
      EXPECT_NEAR(d, V.at("ema_decay_d").get<double>(), 1e-15);
      EXPECT_EQ(ema.updates(), V.at("ema_updates").get<int64_t>());

      // Changed/unchanged state keys over the FULL state (not only the stored subset).
      int64_t changed = 0, unchanged = 0;
      for (const auto& [n, t] : after) (bitwise_equal(t, M.at("state." + n)) ? unchanged : changed) += 1;
      EXPECT_EQ(changed, V.at("changed_state_keys").get<int64_t>());
      EXPECT_EQ(unchanged, V.at("unchanged_state_keys").get<int64_t>());

      // --- compare with every stored tensor of this variant ------------------------------------
      std::map<std::string, Tensor> after_map(after.begin(), after.end());
      double worst_model = 0, worst_ema = 0, worst_buf = 0;
      int64_t n_model = 0, n_ema = 0, n_buf = 0;
      for (const auto& [key, ref] : S) {
        if (auto n = strip_prefix(key, vname + ".model."); !n.empty()) {
          ASSERT_TRUE(after_map.count(n)) << key;
          const double e = max_abs_diff(after_map.at(n), ref);
          EXPECT_LE(e, kTol) << key;
          worst_model = std::max(worst_model, e);
          ++n_model;
        } else if (auto n = strip_prefix(key, vname + ".ema."); !n.empty()) {
          const double e = max_abs_diff(ema.at(n), ref);
          EXPECT_LE(e, kTol) << key;
          worst_ema = std::max(worst_ema, e);
          ++n_ema;
        } else if (auto n = strip_prefix(key, "post_warmup.momentum_buffer."); !n.empty()) {
          // First-step buffers are grad + wd*param whatever lr/momentum: same for every variant.
          Tensor buf = opt->state(n, "momentum_buffer");
          ASSERT_TRUE(buf.defined()) << key;
          const double e = max_abs_diff(buf, ref);
          EXPECT_LE(e, kTol) << key;
          worst_buf = std::max(worst_buf, e);
          ++n_buf;
        }
      }
      EXPECT_GT(n_model, 0);
      EXPECT_GT(n_ema, 0);
      EXPECT_GT(n_buf, 0);
      std::printf("[%s] max |diff|: model %.3g over %lld tensors, ema %.3g over %lld, momentum_buffer %.3g over %lld; "
                  "changed keys %lld / unchanged %lld\n",
                  vname.c_str(), worst_model, static_cast<long long>(n_model), worst_ema,
                  static_cast<long long>(n_ema), worst_buf, static_cast<long long>(n_buf),
                  static_cast<long long>(changed), static_cast<long long>(unchanged));
    }
  }
}

}  // namespace optim_step_ref
