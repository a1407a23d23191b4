// Inference transforms on the official whole-model fixtures (every model_*.json): outputs before
// and after Conv+BN / RepConvN fusion agree, and the PGI re-parameterisation of each dual
// (yolov9-X) fixture gives a gelan-X model whose outputs equal the dual main branch and the
// official gelan fixture. The re-parameterisation mapping is cross-checked against each gelan
// fixture's weights_key_map (the fixtures share weights through exactly that mapping).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "engine/autograd.h"
#include "graph/fuse.h"
#include "graph/state.h"
#include "io/safetensors.h"
#include "tests/graph/graph_ref_util.h"

namespace {

using engine::Tensor;

std::shared_ptr<graph::Model> load_fixture_model(const std::string& ref, const nlohmann::json& j) {
  auto m = graphtest::load_model_fixture(ref, j).model;
  m->eval();
  return m;
}

graph::ModelOutput run(graph::Model& m, const Tensor& x) {
  engine::autograd::NoGradGuard no_grad;
  return m.forward(x);
}

// Transforms change results only by float rounding: 1e-4 relative + 1e-6 of the scale.
void expect_same(const graph::ModelOutput& a, const graph::ModelOutput& b, size_t b_branch_of_a, const std::string& what) {
  ASSERT_EQ(b.raw.size(), 1u);
  for (size_t l = 0; l < b.raw[0].size(); ++l) {
    EXPECT_TRUE(graphtest::close(b.raw[0][l], a.raw[b_branch_of_a][l], 1e-4, 1e-6)) << what << " raw " << l;
  }
  EXPECT_TRUE(graphtest::close(b.decoded[0], a.decoded[b_branch_of_a], 1e-4, 1e-6)) << what << " decoded";
  std::printf("  %s: decoded scaled err %.2e\n", what.c_str(), graphtest::scaled_error(b.decoded[0], a.decoded[b_branch_of_a]));
}

}  // namespace

TEST(TransformsRef, FusionKeepsOutputs) {
  const std::string ref = testutil::reference_dir();
  if (ref.empty()) GTEST_SKIP() << "no reference folder";
  const auto files = testutil::glob_files(ref, "model_*.json");
  ASSERT_FALSE(files.empty());
  for (const auto& jf : files) {
    SCOPED_TRACE(jf);
    const auto j = graphtest::read_json(jf);
    auto m = load_fixture_model(ref, j);
    const Tensor x = io::load_safetensors(ref + "/" + j.at("tensors_file").get<std::string>()).tensors.at("input");
    const auto before = run(*m, x);
    const double gflops_before = m->gflops(640, 640);
    const int64_t params_before = m->num_parameters();
    const int n = graph::fuse(*m);
    EXPECT_GT(n, 0);
    for (const auto& [name, t] : m->state_dict()) EXPECT_EQ(name.find(".bn."), std::string::npos) << name;
    const auto after = run(*m, x);
    ASSERT_EQ(after.raw.size(), before.raw.size());
    for (size_t b = 0; b < before.raw.size(); ++b) {
      for (size_t l = 0; l < before.raw[b].size(); ++l)
        EXPECT_TRUE(graphtest::close(after.raw[b][l], before.raw[b][l], 1e-4, 1e-6)) << b << "." << l;
      EXPECT_TRUE(graphtest::close(after.decoded[b], before.decoded[b], 1e-4, 1e-6)) << "decoded " << b;
      std::printf("  %s fused %d modules: decoded[%zu] scaled err %.2e\n", jf.c_str(), n, b,
                  graphtest::scaled_error(after.decoded[b], before.decoded[b]));
    }
    // The fused graph has fewer parameters (BN affine + 1x1 branches folded) and fewer MACs.
    EXPECT_LT(m->num_parameters(), params_before);
    EXPECT_LT(m->gflops(640, 640), gflops_before);
  }
}

TEST(TransformsRef, ReparameterisationEqualsMainBranch) {
  const std::string ref = testutil::reference_dir();
  if (ref.empty()) GTEST_SKIP() << "no reference folder";
  const auto files = testutil::glob_files(ref, "model_*.json");
  int dual = 0, cross = 0;
  for (const auto& jf : files) {
    SCOPED_TRACE(jf);
    const auto j = graphtest::read_json(jf);
    auto m = load_fixture_model(ref, j);
    if (m->head()->branches < 2) continue;
    ++dual;
    const std::string cfg_name = std::filesystem::path(j.at("cfg").get<std::string>()).filename().string();
    ASSERT_EQ(cfg_name.rfind("yolov9-", 0), 0u) << cfg_name;
    const std::string gelan_name = "gelan-" + cfg_name.substr(7);
    const auto gelan_cfg = graph::load_model_config(graphtest::config_path(gelan_name), m->nc());
    const Tensor x = io::load_safetensors(ref + "/" + j.at("tensors_file").get<std::string>()).tensors.at("input");
    const auto out_dual = run(*m, x);
    const size_t main = static_cast<size_t>(m->head()->branches - 1);

    auto g = graph::reparameterize(*m, gelan_cfg);
    expect_same(out_dual, run(*g, x), main, gelan_name + " (reparameterised) vs " + cfg_name + " main branch");

    // Cross-check: every gelan fixture built from this dual fixture's weights names the same
    // source tensors through its weights_key_map as pgi_mapping does.
    const auto mapping = graph::pgi_mapping(gelan_cfg, m->config());
    for (const auto& gf : files) {
      const auto gj = graphtest::read_json(gf);
      if (gj.value("weights_file", std::string()) != j.at("tensors_file").get<std::string>() ||
          std::filesystem::path(gj.at("cfg").get<std::string>()).filename().string() != gelan_name)
        continue;
      ++cross;
      graph::LoadOptions fixture_map, ours;
      for (const auto& [from, to] : gj.at("weights_key_map").items()) fixture_map.rename.emplace_back(from, to.get<std::string>());
      ours.rename = mapping;
      for (const auto& [name, t] : g->state_dict())
        EXPECT_EQ(graph::source_name(name, ours), graph::source_name(name, fixture_map)) << name;
      // And the reparameterised model reproduces the official gelan fixture outputs.
      const auto gts = io::load_safetensors(ref + "/" + gj.at("tensors_file").get<std::string>()).tensors;
      const auto out_g = run(*g, x);
      for (size_t l = 0; l < out_g.raw[0].size(); ++l)
        EXPECT_TRUE(graphtest::close(out_g.raw[0][l], gts.at("eval.raw." + std::to_string(l)), 1e-4, 1e-6)) << l;
      EXPECT_TRUE(graphtest::close(out_g.decoded[0], gts.at("eval.decoded"), 1e-4, 1e-6));
    }

    // Re-parameterise, then fuse: still the main branch.
    graph::fuse(*g);
    expect_same(out_dual, run(*g, x), main, gelan_name + " reparameterised + fused vs " + cfg_name + " main branch");
  }
  std::printf("  %d dual fixtures, %d gelan cross-checks\n", dual, cross);
  EXPECT_GT(dual, 0);
}
