// Unit tests of apps/training/pt_resume: the torch.optim state of an official checkpoint
// (tests/data/pt/tiny_resume.pt, written by make_pt_testdata.py through the official
// smart_optimizer) lands on the right parameters of our optimizer: every momentum buffer there is
// its parameter's value + 0.5, so a buffer on another parameter (of the same shape or not) shows.
// Also the per-group lr / initial_lr / momentum, the options dict, and the errors of a state that
// does not fit (group count, group size, shape, optimizer kind), which name the file and the
// parameter.
#include "apps/training/pt_resume.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "apps/training/param_groups.h"
#include "engine/error.h"
#include "graph/model.h"
#include "io/torch_pt.h"

using engine::Tensor;
using namespace training;

namespace {

std::string file() { return std::string(Y9_SOURCE_DIR) + "/tests/data/pt/tiny_resume.pt"; }

struct Fixture {
  io::TorchPt pt;
  io::Checkpoint ck;
  std::shared_ptr<graph::Model> model;
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<Optimizer> opt;

  explicit Fixture(OptimizerKind kind = OptimizerKind::SGD) {
    pt = io::load_torch_pt(file());
    ck = io::torch_pt_checkpoint(pt);
    graph::BuildOptions bo;
    model = std::make_shared<graph::Model>(graph::parse_model_config(ck.meta.at("cfg_yaml"), "tiny.yaml", 2), bo);
    store = std::make_unique<ParamStore>(model->named_parameters());
    opt = make_official_optimizer(kind, *store, official_param_split(*model), 0.01, 0.937, 0.0005);
  }
};

template <class F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const engine::ConfigError& e) {
    return e.message();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

}  // namespace

TEST(PtResume, EveryMomentumBufferLandsOnItsParameter) {
  Fixture f;
  const io::PtOptimizerState st = io::pt_optimizer_state(f.pt);
  ASSERT_EQ(st.groups.size(), 3u);
  f.opt->load_state_dict(torch_optimizer_state_dict(st, *f.opt, file()));
  int64_t checked = 0, without = 0;
  for (size_t i = 0; i < f.store->size(); ++i) {
    const std::string& name = f.store->name(i);
    const Tensor buf = f.opt->state(name, "momentum_buffer");
    if (!f.store->trainable(i)) {
      EXPECT_FALSE(buf.defined()) << name;
      ++without;
      continue;
    }
    ASSERT_TRUE(buf.defined()) << name;
    const Tensor w = f.ck.model.at(name);  // the FP16 model as F32: exactly the values saved
    ASSERT_EQ(buf.shape(), w.shape()) << name;
    const auto b = buf.to_vector<float>(), v = w.to_vector<float>();
    for (size_t k = 0; k < b.size(); ++k) ASSERT_NEAR(b[k], v[k] + 0.5f, 1e-6f) << name << "[" << k << "]";
    EXPECT_EQ(f.opt->state_step(name), 1) << name;  // stepped: the next update blends the buffer
    ++checked;
  }
  EXPECT_EQ(without, 1);  // the DFL conv weight: no gradient, no state (official and ours)
  EXPECT_GT(checked, 20);
  // Group g of the file -> our group g (biases, decayed weights, normalisation weights).
  const auto& g = f.opt->param_groups();
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_DOUBLE_EQ(g[k].lr, 0.011 + 0.001 * static_cast<double>(k)) << k;
    EXPECT_DOUBLE_EQ(g[k].initial_lr, 0.021 + 0.001 * static_cast<double>(k)) << k;
    EXPECT_DOUBLE_EQ(g[k].momentum, 0.81 + 0.01 * static_cast<double>(k)) << k;
    EXPECT_TRUE(g[k].nesterov);
  }
  EXPECT_DOUBLE_EQ(g[0].weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(g[1].weight_decay, 0.0005);
  EXPECT_DOUBLE_EQ(g[2].weight_decay, 0.0);
  for (const auto& [n, t] : g[0].params) EXPECT_EQ(n.substr(n.size() - 5), ".bias") << n;
}

TEST(PtResume, MetadataAndOptions) {
  Fixture f;
  EXPECT_EQ(f.ck.meta.at("epoch"), "1");
  EXPECT_DOUBLE_EQ(std::stod(f.ck.meta.at("best_fitness")), 0.125);  // a NumPy array in the file
  EXPECT_EQ(f.ck.meta.at("pt_optimizer"), "1");
  nlohmann::json hyp;
  const TrainOptions o =
      options_from_official(nlohmann::json(io::pt_to_json(f.pt.root->get("opt"))), hyp, "tiny_resume.pt");
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.batch_size, 2);
  EXPECT_EQ(o.imgsz, 32);
  EXPECT_EQ(o.data, "data/tiny.yaml");
  EXPECT_EQ(o.evolve, 0);     // None: our default
  EXPECT_EQ(o.cache, "");     // None
  EXPECT_EQ(o.upload_dataset, "");  // False
  EXPECT_EQ(o.save_dir, "runs/train/exp");
  ASSERT_TRUE(hyp.is_object());
  EXPECT_DOUBLE_EQ(hyp.at("lr0").get<double>(), 0.01);
  // opt.yaml text: the same through the YAML reader
  const nlohmann::json y = yaml_text_to_json("epochs: 5\nevolve: null\ncache:\nrect: false\nname: '1'\nlr: 0.5\n", "x");
  EXPECT_EQ(y.at("epochs"), 5);
  EXPECT_TRUE(y.at("evolve").is_null());
  EXPECT_TRUE(y.at("cache").is_null());
  EXPECT_EQ(y.at("rect"), false);
  EXPECT_EQ(y.at("name"), "1");
  EXPECT_DOUBLE_EQ(y.at("lr").get<double>(), 0.5);
}

TEST(PtResume, StateThatDoesNotFitIsRefusedNamingFileAndParameter) {
  Fixture f;
  const io::PtOptimizerState st = io::pt_optimizer_state(f.pt);
  {
    io::PtOptimizerState s = st;
    s.groups.pop_back();
    const std::string m = config_error([&] { torch_optimizer_state_dict(s, *f.opt, "ck.pt"); });
    EXPECT_NE(m.find("ck.pt"), std::string::npos) << m;
    EXPECT_NE(m.find("2 parameter groups"), std::string::npos) << m;
  }
  {
    io::PtOptimizerState s = st;
    s.groups[1].params.pop_back();
    const std::string m = config_error([&] { torch_optimizer_state_dict(s, *f.opt, "ck.pt"); });
    EXPECT_NE(m.find("group 1"), std::string::npos) << m;
  }
  {
    io::PtOptimizerState s = st;
    const int64_t id = s.groups[1].params.front();  // the first decayed weight
    s.state[id]["momentum_buffer"] = Tensor::zeros({3}, engine::DType::F32);
    const std::string m = config_error([&] { torch_optimizer_state_dict(s, *f.opt, "ck.pt"); });
    const std::string name = f.opt->param_groups()[1].params.front().first;
    EXPECT_NE(m.find(name), std::string::npos) << m;
    EXPECT_NE(m.find("shape"), std::string::npos) << m;
  }
  {
    Fixture adam(OptimizerKind::Adam);  // an SGD state for an Adam run
    const std::string m = config_error([&] { torch_optimizer_state_dict(st, *adam.opt, "ck.pt"); });
    EXPECT_NE(m.find("Adam"), std::string::npos) << m;
  }
}

TEST(PtResume, AdamStateWithSteps) {
  // An AdamW state as torch 1.13 writes it (step a 0-d tensor; amsgrad max_exp_avg_sq).
  Fixture f(OptimizerKind::AdamW);
  io::PtOptimizerState s;
  int64_t id = 0;
  for (const auto& g : f.opt->param_groups()) {
    io::PtOptimizerState::Group grp;
    grp.numbers = {{"lr", 0.001}, {"beta1", 0.9}, {"beta2", 0.999}, {"weight_decay", 0.0}};
    for (const auto& [n, t] : g.params) {
      grp.params.push_back(id);
      if (Tensor(t).requires_grad()) {
        auto& st = s.state[id];
        st["exp_avg"] = Tensor::full(t.shape(), static_cast<double>(id), engine::DType::F32);
        st["exp_avg_sq"] = Tensor::full(t.shape(), 2.0 * static_cast<double>(id), engine::DType::F32);
        st["max_exp_avg_sq"] = Tensor::full(t.shape(), 3.0 * static_cast<double>(id), engine::DType::F32);
        st["step"] = Tensor::full({}, 7.0, engine::DType::F64);
      }
      ++id;
    }
    s.groups.push_back(grp);
  }
  f.opt->load_state_dict(torch_optimizer_state_dict(s, *f.opt, "adam.pt"));
  id = 0;
  for (const auto& g : f.opt->param_groups()) {
    EXPECT_DOUBLE_EQ(g.momentum, 0.9);
    for (const auto& [n, t] : g.params) {
      if (Tensor(t).requires_grad()) {
        EXPECT_EQ(f.opt->state_step(n), 7) << n;
        EXPECT_FLOAT_EQ(f.opt->state(n, "exp_avg_sq").to_vector<float>()[0], 2.0f * static_cast<float>(id)) << n;
        EXPECT_FLOAT_EQ(f.opt->state(n, "max_exp_avg_sq").to_vector<float>()[0], 3.0f * static_cast<float>(id)) << n;
      }
      ++id;
    }
  }
}
