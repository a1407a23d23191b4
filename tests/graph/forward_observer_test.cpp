// The layer observer of graph::Model::forward (issue 16 item 20): it sees every layer before the
// head, in order, with the outputs the trace predicts, and the observed forward returns exactly
// what the plain forward returns (yolov9-c with its CBLinear pieces).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/autograd.h"
#include "graph/model.h"

namespace {

using engine::Tensor;

std::string cfg(const std::string& file) { return std::string(Y9_SOURCE_DIR) + "/configs/models/" + file; }

Tensor random_image(int64_t b, int64_t s) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(b * 3 * s * s));
  for (float& x : v) x = u(rng);
  return Tensor::from_vector(v, {b, 3, s, s});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * engine::dtype_size(x.dtype())) == 0;
}

void expect_same_output(const graph::ModelOutput& a, const graph::ModelOutput& b) {
  ASSERT_EQ(a.raw.size(), b.raw.size());
  for (size_t k = 0; k < a.raw.size(); ++k) {
    ASSERT_EQ(a.raw[k].size(), b.raw[k].size());
    for (size_t l = 0; l < a.raw[k].size(); ++l) EXPECT_TRUE(same_bits(a.raw[k][l], b.raw[k][l])) << k << "." << l;
  }
  ASSERT_EQ(a.decoded.size(), b.decoded.size());
  for (size_t k = 0; k < a.decoded.size(); ++k) EXPECT_TRUE(same_bits(a.decoded[k], b.decoded[k])) << k;
}

}  // namespace

TEST(ForwardObserver, SeesEveryLayerBeforeTheHeadAndChangesNothing) {
  for (const char* name : {"gelan-t.yaml", "yolov9-c.yaml"}) {
    SCOPED_TRACE(name);
    graph::BuildOptions bo;
    bo.seed = 5;
    auto m = graph::Model::from_yaml(cfg(name), 3, bo);
    const Tensor x = random_image(2, 64);
    const auto dims = m->trace(64, 64);
    engine::autograd::NoGradGuard ng;
    m->eval();
    const auto plain = m->forward(x);
    std::vector<int64_t> seen;
    const auto observed = m->forward(x, [&](int64_t i, const graph::Block& layer, const std::vector<Tensor>& outs) {
      seen.push_back(i);
      EXPECT_EQ(&layer, m->layer(i));
      const auto& want = dims.at(static_cast<size_t>(i));
      ASSERT_EQ(outs.size(), want.size()) << "layer " << i << " " << layer.type_name();
      for (size_t k = 0; k < outs.size(); ++k)
        EXPECT_EQ(outs[k].shape(), (engine::Shape{2, want[k].c, want[k].h, want[k].w})) << "layer " << i;
    });
    ASSERT_EQ(static_cast<int64_t>(seen.size()), m->num_layers() - 1) << "every layer but the head";
    for (size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k], static_cast<int64_t>(k));
    expect_same_output(plain, observed);
    // An empty observer is the plain forward.
    expect_same_output(plain, m->forward(x, graph::Model::LayerObserver()));
  }
}
