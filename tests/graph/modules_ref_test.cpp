// YOLOv9 blocks against every official module_*.json fixture except the Conv ones (those are
// covered by tests/ops/conv_module_ref_test.cpp): builds the block from constructor_args, loads
// state.*, and compares the train-mode outputs, the gradients of sum_k sum(out_k * gradw_k) with
// respect to every input and parameter, the BN buffers after the train step, and the eval-mode
// outputs (each mode starting from state.*).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "engine/autograd.h"
#include "engine/error.h"
#include "graph/modules.h"
#include "graph/state.h"
#include "io/safetensors.h"
#include "ops/ops.h"
#include "tests/graph/graph_ref_util.h"

namespace {

using engine::Tensor;
using Named = std::vector<std::pair<std::string, Tensor>>;

// The fixture harness wrapper of CBLinear + CBFuse: oa = cbl_a(x0), ob = cbl_b(x1),
// fused = fuse([oa, ob, x2]); outputs out.0.* = oa, out.1.* = ob, out.2 = fused.
class CBWrapper : public graph::Module {
 public:
  CBWrapper(int64_t ca, std::vector<int64_t> c2a, int64_t cb, std::vector<int64_t> c2b, std::vector<int64_t> idx) {
    a = register_module("cbl_a", std::make_shared<graph::CBLinear>(ca, std::move(c2a)));
    b = register_module("cbl_b", std::make_shared<graph::CBLinear>(cb, std::move(c2b)));
    fuse = register_module("fuse", std::make_shared<graph::CBFuse>(std::move(idx)));
  }
  std::string type_name() const override { return "CBLinear_CBFuse"; }
  std::shared_ptr<graph::CBLinear> a, b;
  std::shared_ptr<graph::CBFuse> fuse;
};

struct Built {
  std::shared_ptr<graph::Module> module;
  /// Runs the module on `xs`; returns outputs named like the fixture, under `base`
  /// ("out_train" / "out_eval").
  std::function<Named(const std::vector<Tensor>& xs, const std::string& base)> run;
};

std::vector<int64_t> ints(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

/// The layout the blocks run in: 0 plain NCHW, else the CPU's channel block (ops::to_blocked). A
/// block given a blocked input keeps its activations blocked (graph/forward.cpp); the fixtures'
/// inputs and outputs stay plain, through the differentiable conversions.
int64_t g_block = 0;

/// x in the layout under test (plain when its channels are not a multiple of the block).
Tensor in_layout(const Tensor& x) {
  return g_block && x.dim() == 4 && x.size(1) % g_block == 0 ? ops::to_blocked(x, g_block) : x;
}

Built build(const std::string& kind, const nlohmann::json& js) {
  const auto& a = js.at("constructor_args");
  auto i = [&](const char* k) { return a.at(k).get<int64_t>(); };
  const auto act = graph::Act::SiLU;
  std::shared_ptr<graph::UnaryBlock> u;
  if (kind == "RepNCSPELAN4") u = std::make_shared<graph::RepNCSPELAN4>(i("c1"), i("c2"), i("c3"), i("c4"), a.value("c5", int64_t{1}), act);
  else if (kind == "ADown") u = std::make_shared<graph::ADown>(i("c1"), i("c2"), act);
  else if (kind == "AConv") u = std::make_shared<graph::AConv>(i("c1"), i("c2"), act);
  else if (kind == "SPPELAN") u = std::make_shared<graph::SPPELAN>(i("c1"), i("c2"), i("c3"), act);
  else if (kind == "ELAN1") u = std::make_shared<graph::ELAN1>(i("c1"), i("c2"), i("c3"), i("c4"), act);
  if (u) return {u, [u](const std::vector<Tensor>& xs, const std::string& base) { return Named{{base, ops::from_blocked(u->forward(in_layout(xs.at(0))))}}; }};

  if (kind == "CBLinear_CBFuse") {
    auto w = std::make_shared<CBWrapper>(i("c_a"), ints(a.at("c2s_a")), i("c_b"), ints(a.at("c2s_b")), ints(a.at("idx")));
    return {w, [w](const std::vector<Tensor>& xs, const std::string& base) {
              auto oa = w->a->forward(in_layout(xs.at(0)));
              auto ob = w->b->forward(in_layout(xs.at(1)));
              Named out;
              for (size_t k = 0; k < oa.size(); ++k) out.emplace_back(base + ".0." + std::to_string(k), oa[k]);
              for (size_t k = 0; k < ob.size(); ++k) out.emplace_back(base + ".1." + std::to_string(k), ob[k]);
              out.emplace_back(base + ".2", w->fuse->forward({oa, ob}, in_layout(xs.at(2))));
              return out;
            }};
  }
  if (kind == "DDetect" || kind == "DualDDetect") {
    const int branches = kind == "DDetect" ? 1 : 2;
    auto d = std::make_shared<graph::Detect>(i("nc"), ints(a.at("ch")), branches, act);
    const auto strides = js.at("strides").get<std::vector<double>>();
    d->stride = strides;
    return {d, [d, branches](const std::vector<Tensor>& xs, const std::string& base) {
              std::vector<Tensor> xl;
              for (const Tensor& x : xs) xl.push_back(in_layout(x));
              auto out = d->forward(xl);
              Named r;
              // Training: raw list (per branch for dual heads). Eval: (decoded, raw).
              const std::string raw_base = d->training() ? base : base + ".1";
              for (size_t b = 0; b < out.raw.size(); ++b)
                for (size_t l = 0; l < out.raw[b].size(); ++l)
                  r.emplace_back(raw_base + (branches > 1 ? "." + std::to_string(b) : "") + "." + std::to_string(l),
                                 out.raw[b][l]);
              for (size_t b = 0; b < out.decoded.size(); ++b)
                r.emplace_back(base + ".0" + (branches > 1 ? "." + std::to_string(b) : ""), out.decoded[b]);
              return r;
            }};
  }
  Y9_THROW(engine::ConfigError, "modules_ref_test: no builder for fixture module ", kind);
}

// Our gradients (fixture key -> tensor: grad_train.input.i and grad_train.<param>) of a fresh
// train-mode module loaded from the fixture's state, on the inputs scaled by (1 + f).
std::map<std::string, Tensor> grads_for(const std::string& kind, const nlohmann::json& js,
                                        const std::map<std::string, Tensor>& ts, const graph::LoadOptions& lo,
                                        const std::vector<Tensor>& xs, double f) {
  Built b = build(kind, js);
  graph::load_state_dict(*b.module, ts, lo);
  b.module->train();
  std::vector<Tensor> xp;
  for (const auto& x : xs) {
    Tensor c = x.detach().clone();
    {
      engine::autograd::NoGradGuard ng;
      c.mul_(1.0 + f);
    }
    xp.push_back(c.set_requires_grad(true));
  }
  std::vector<Tensor> roots, weights;
  for (const auto& [k, t] : b.run(xp, "out_train")) {
    roots.push_back(t);
    weights.push_back(ts.at("gradw_train" + k.substr(std::string("out_train").size())));
  }
  engine::autograd::backward(roots, weights);
  std::map<std::string, Tensor> g;
  for (size_t k = 0; k < xp.size(); ++k) g["grad_train.input." + std::to_string(k)] = xp[k].grad();
  for (const auto& [name, p] : b.module->named_parameters())
    if (p.requires_grad()) g["grad_train." + name] = p.grad();
  return g;
}

}  // namespace

namespace {

/// Every non-Conv module fixture with the blocks in the layout of `block` (g_block).
void check_all_fixtures(int64_t block) {
  const std::string dir = testutil::reference_dir();
  if (dir.empty()) GTEST_SKIP() << "reference fixture folder not found (set YOLOV9_REFERENCE)";
  g_block = block;
  int ran = 0;
  for (const std::string& jf : testutil::glob_files(dir, "module_*.json")) {
    const auto js = graphtest::read_json(jf);
    const std::string kind = js.at("module").get<std::string>();
    if (kind.rfind("Conv", 0) == 0) continue;  // tests/ops/conv_module_ref_test.cpp
    SCOPED_TRACE(jf);
    ++ran;
    const auto ts = io::load_safetensors(dir + "/" + js.at("tensors_file").get<std::string>()).tensors;
    graph::LoadOptions lo;
    lo.prefix = "state.";
    lo.strict_unused = true;  // every fixture state tensor must belong to our module

    std::vector<Tensor> xs;
    for (const auto& k : graphtest::numbered(ts, "input")) xs.push_back(ts.at(k).clone().set_requires_grad(true));
    ASSERT_EQ(xs.size(), js.at("input_shapes").size());
    for (size_t k = 0; k < xs.size(); ++k) ASSERT_EQ(xs[k].shape(), ints(js.at("input_shapes")[k]));

    // --- train mode: outputs, gradients, buffers -----------------------------------------------------
    Built tr = build(kind, js);
    graph::load_state_dict(*tr.module, ts, lo);
    tr.module->train();
    Named out = tr.run(xs, "out_train");
    size_t want_outputs = 0;
    for (const auto& [k, t] : ts) want_outputs += (k == "out_train" || k.rfind("out_train.", 0) == 0) ? 1 : 0;
    ASSERT_EQ(out.size(), want_outputs);
    std::vector<Tensor> roots, weights;
    for (const auto& [k, t] : out) {
      ASSERT_TRUE(ts.count(k)) << "fixture lacks " << k;
      EXPECT_TRUE(graphtest::close(t, ts.at(k), 1e-4, 1e-6)) << k;
      std::printf("  %-16s %-18s scaled err %.2e\n", kind.c_str(), k.c_str(), graphtest::scaled_error(t, ts.at(k)));
      const std::string wk = "gradw_train" + k.substr(std::string("out_train").size());
      roots.push_back(t);
      weights.push_back(ts.at(wk));
    }
    engine::autograd::backward(roots, weights);

    // Gradients: 1e-4 relative plus an absolute term for elements near zero (gradients are sums
    // over N*H*W terms and BN subtracts their mean, so small elements carry the rounding of the
    // whole sum). The absolute term is calibrated per tensor from the fixture's conditioning, as
    // tests/train/model_loss_ref_test.cpp does: our own gradients for the inputs scaled by
    // (1 +- 2^-23) move by `noise` of the tensor's scale from float rounding alone, and any FP32
    // implementation summing in another order than PyTorch's is off by that much. Measured
    // against a float64 run of the official modules, PyTorch's FP32 gradients and ours are equally
    // far from the exact values (both up to ~3e-6 of the scale at batch 2 and 40x40 maps, the
    // second fixture set; neither side is the less accurate one), and |ours - fixture| reaches
    // 2.6x the noise on the shipped and the second set, so the bound is
    // max(1e-6, kNoiseFactor x noise) x max|ref| with kNoiseFactor 4. A backward bug (wrong term,
    // sign, missing path) moves a gradient by a sizeable part of its scale, far beyond ~1e-5.
    constexpr double kNoiseFactor = 4.0;
    const auto g_up = grads_for(kind, js, ts, lo, xs, std::ldexp(1.0, -23));
    const auto g_down = grads_for(kind, js, ts, lo, xs, -std::ldexp(1.0, -23));
    std::set<std::string> checked;
    double worst_grad = 0, worst_ratio = 0;
    std::string worst_key;
    auto check_grad = [&](const std::string& key, const Tensor& g) {
      ASSERT_TRUE(ts.count(key)) << "fixture lacks " << key;
      ASSERT_TRUE(g.defined()) << "no gradient for " << key;
      const double noise = std::max(graphtest::scaled_error(g_up.at(key), g), graphtest::scaled_error(g_down.at(key), g));
      const double atol_scale = std::max(1e-6, kNoiseFactor * noise);
      EXPECT_TRUE(graphtest::close(g, ts.at(key), 1e-4, atol_scale)) << key << " (one-ulp input noise " << noise << ")";
      const double err = graphtest::scaled_error(g, ts.at(key));
      worst_grad = std::max(worst_grad, err);
      if (err / atol_scale > worst_ratio) worst_ratio = err / atol_scale, worst_key = key;
      if (std::getenv("Y9_VERBOSE"))
        std::printf("    %-16s %-50s err %.2e noise %.2e err/noise %.2f\n", kind.c_str(), key.c_str(), err, noise,
                    noise > 0 ? err / noise : 0.0);
      checked.insert(key);
    };
    for (size_t k = 0; k < xs.size(); ++k) check_grad("grad_train.input." + std::to_string(k), xs[k].grad());
    for (const auto& [name, p] : tr.module->named_parameters())
      if (p.requires_grad()) check_grad("grad_train." + name, p.grad());
    for (const auto& [k, t] : ts)
      if (k.rfind("grad_train.", 0) == 0) EXPECT_TRUE(checked.count(k)) << "fixture gradient not produced: " << k;
    std::printf("  %-16s %zu gradients, worst scaled err %.2e, worst err/(absolute bound) %.2f (%s)\n", kind.c_str(),
                checked.size(), worst_grad, worst_ratio, worst_key.c_str());

    double worst_buf = 0;
    for (const auto& [name, b] : tr.module->named_buffers()) {
      const std::string k = "state_after_train." + name;
      ASSERT_TRUE(ts.count(k)) << "fixture lacks " << k;
      EXPECT_TRUE(graphtest::close(b, ts.at(k), 1e-4, 1e-6)) << k;
      worst_buf = std::max(worst_buf, graphtest::scaled_error(b.reshape(ts.at(k).shape()), ts.at(k)));
    }
    std::printf("  %-16s %zu buffers after train, worst scaled err %.2e\n", kind.c_str(),
                tr.module->named_buffers().size(), worst_buf);

    // --- eval mode from the initial state ------------------------------------------------------------
    Built ev = build(kind, js);
    graph::load_state_dict(*ev.module, ts, lo);
    ev.module->eval();
    engine::autograd::NoGradGuard no_grad;
    std::vector<Tensor> xe;
    for (const auto& x : xs) xe.push_back(x.detach());
    Named oute = ev.run(xe, "out_eval");
    std::set<std::string> seen;
    for (const auto& [k, t] : oute) {
      ASSERT_TRUE(ts.count(k)) << "fixture lacks " << k;
      EXPECT_TRUE(graphtest::close(t, ts.at(k), 1e-4, 1e-6)) << k;
      std::printf("  %-16s %-18s scaled err %.2e\n", kind.c_str(), k.c_str(), graphtest::scaled_error(t, ts.at(k)));
      seen.insert(k);
    }
    for (const auto& [k, t] : ts)
      if (k.rfind("out_eval", 0) == 0) EXPECT_TRUE(seen.count(k)) << "eval output not produced: " << k;
  }
  EXPECT_GT(ran, 0) << "no non-Conv module fixtures in " << dir;
  g_block = 0;
}

}  // namespace

TEST(ModulesRef, AllFixtures) { check_all_fixtures(0); }

// The same fixtures and tolerances with the blocks in the CPU's blocked layout (issue 15 item 1).
TEST(ModulesRef, BlockedAllFixtures) {
  const int64_t block = ops::channel_block(engine::Device::cpu());
  if (block == 0) GTEST_SKIP() << "no blocked layout on this CPU";
  check_all_fixtures(block);
}
