// Autograd engine: topological order, accumulation, no-grad, hooks, and release of saved tensors
// measured through the allocator's live-byte counter.
#include <gtest/gtest.h>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "ops/ops.h"
#include "ops/reduce.h"
#include "tests/testutil.h"

using engine::Tensor;
namespace ag = engine::autograd;

namespace {

// y = x * c, implemented in the test through record_fn so the test controls what is saved.
// Saves a copy of its input (as a real op such as mul would) to make memory visible.
Tensor scale_saving_input(const Tensor& x, double c, std::vector<int64_t>* live_log = nullptr) {
  Tensor y = x.detach().clone();
  {
    ag::NoGradGuard ng;
    y.mul_(c);
  }
  Tensor saved = x.detach().clone();  // stands in for a saved activation
  ag::record_fn("ScaleBackward", {x}, {y}, [saved, c, live_log](const std::vector<Tensor>& g) {
    if (live_log) live_log->push_back(engine::cpu_allocator()->stats().live_bytes);
    Tensor gi = g[0].clone();
    gi.mul_(c);
    (void)saved;
    return std::vector<Tensor>{gi};
  });
  return y;
}

}  // namespace

TEST(Autograd, ChainRuleThroughViewsAndAccumulation) {
  Tensor x = Tensor::arange(6).reshape({2, 3});
  x.set_requires_grad(true);
  // x is used twice (once through a transpose view): gradients from both paths add up.
  Tensor a = scale_saving_input(x, 2.0);
  Tensor b = scale_saving_input(x.transpose(0, 1).slice(0, 1, 3), 3.0);  // columns 1..2 of x
  ag::backward({ops::sum(a), ops::sum(b)}, {Tensor(), Tensor()});
  std::vector<float> expected = {2, 5, 5, 2, 5, 5};
  EXPECT_EQ(x.grad().to_vector<float>(), expected);
  // A second backward accumulates into .grad.
  Tensor c = scale_saving_input(x, 1.0);
  ops::sum(c).backward();
  EXPECT_EQ(x.grad().to_vector<float>()[0], 3.0f);
}

TEST(Autograd, MeanAndPermuteGradients) {
  ASSERT_TRUE(testutil::gradcheck(
      [](const std::vector<Tensor>& in) { return ops::mean(in[0].permute({1, 0, 2}), {0, 2}, true); },
      {testutil::random_tensor({3, 4, 5}, 1)}));
  ASSERT_TRUE(testutil::gradcheck(
      [](const std::vector<Tensor>& in) { return ops::sum(in[0].slice(1, 1, 5, 2).reshape({-1, 2}), {1}); },
      {testutil::random_tensor({3, 5, 2}, 2)}));
  ASSERT_TRUE(testutil::gradcheck(
      [](const std::vector<Tensor>& in) { return in[0].unsqueeze(0).expand({4, 3, 2}).contiguous(); },
      {testutil::random_tensor({3, 2}, 3)}));
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = Tensor::ones({4});
  x.set_requires_grad(true);
  {
    ag::NoGradGuard ng;
    Tensor y = ops::sum(x.reshape({2, 2}));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  Tensor z = ops::sum(x);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_THROW(Tensor::ones({1}).backward(), engine::Error);  // nothing requires grad
}

TEST(Autograd, SavedTensorsAreReleasedAfterBackward) {
  Tensor x = Tensor::ones({8});
  x.set_requires_grad(true);
  Tensor y = ops::sum(scale_saving_input(x, 2.0));
  y.backward();
  EXPECT_THROW(y.backward(), engine::Error);  // saved state is gone
  Tensor x2 = Tensor::ones({8});
  x2.set_requires_grad(true);
  Tensor y2 = ops::sum(scale_saving_input(x2, 2.0));
  y2.backward(Tensor(), /*retain_graph=*/true);
  y2.backward();
  EXPECT_EQ(x2.grad().to_vector<float>()[0], 4.0f);
}

TEST(Autograd, GradReadyHookFiresOncePerBackward) {
  Tensor w = Tensor::ones({3});
  w.set_requires_grad(true);
  int fired = 0;
  w.register_grad_ready_hook([&](const Tensor& p) {
    fired++;
    EXPECT_TRUE(p.grad().defined());
  });
  ag::backward({ops::sum(scale_saving_input(w, 1.0)), ops::sum(scale_saving_input(w, 2.0))}, {Tensor(), Tensor()});
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(w.grad().to_vector<float>()[2], 3.0f);
}

// A leaf's gradient is accumulated (and its hook fires) as soon as its last gradient arrives, not
// after every node newer than its AccumulateGrad node, which is created at the leaf's first use
// and so is old from the second iteration on (PyTorch gives AccumulateGrad the highest sequence
// number). The data-parallel reducer depends on it: otherwise every bucket is ready only at the
// end of backward. Chain x -> *a -> *b -> sum, where `b` (the leaf nearest the loss) was first used
// long before: its hook must fire before the node that computes `a`'s gradient runs.
TEST(Autograd, LeafGradientIsReadyBeforeOlderNodesRun) {
  Tensor a = Tensor::full({4}, 2.0), b = Tensor::full({4}, 3.0);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  (void)ops::sum(scale_saving_input(b, 1.0));  // b's AccumulateGrad node is created here, first
  std::vector<std::string> order;
  b.register_grad_ready_hook([&](const Tensor&) { order.push_back("b"); });
  a.register_grad_ready_hook([&](const Tensor&) { order.push_back("a"); });
  Tensor h = scale_saving_input(a, 2.0);  // its node is newer than b's AccumulateGrad node
  Tensor y;
  {
    ag::NoGradGuard ng;
    y = ops::mul(h, b);
  }
  ag::record_fn("MulBackward", {h, b}, {y}, [hd = h.detach(), bd = b.detach()](const std::vector<Tensor>& g) {
    ag::NoGradGuard ng;
    return std::vector<Tensor>{ops::mul(g[0], bd), ops::mul(g[0], hd)};
  });
  ops::sum(y).backward();
  // Before the fix: "a" then "b" (the Scale node for a and a's newer AccumulateGrad ran first).
  EXPECT_EQ(order, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(a.grad().to_vector<float>()[0], 6.0f);  // d(sum(2a * b))/da = 2b
  EXPECT_EQ(b.grad().to_vector<float>()[0], 4.0f);  // = 2a
}

// Peak memory: a chain of L ops, each saving one activation of S bytes. After forward the live
// bytes hold the L saved activations; during backward each node's saved tensor is freed right
// after it runs, so the live bytes seen by successive nodes fall by about S each step, and after
// backward only the input, its gradient and the output remain.
TEST(Autograd, BackwardFreesSavedTensorsProgressively) {
  auto* alloc = engine::cpu_allocator();
  const int64_t n = 1 << 16;  // 256 KiB per f32 activation
  const int64_t S = n * 4;
  const int L = 6;
  int64_t base = alloc->stats().live_bytes;
  std::vector<int64_t> live_log;
  Tensor x = Tensor::ones({n});
  x.set_requires_grad(true);
  Tensor h = x;
  for (int i = 0; i < L; ++i) h = scale_saving_input(h, 1.0, &live_log);
  Tensor loss = ops::sum(h);
  h = Tensor();  // drop our handle on the last activation; the graph keeps what it needs
  int64_t after_forward = alloc->stats().live_bytes - base;
  // At least x and the L saved copies are alive (intermediate outputs are freed once unused).
  EXPECT_GE(after_forward, (1 + L) * S);
  alloc->reset_peak();
  loss.backward();
  ASSERT_EQ(static_cast<int>(live_log.size()), L);
  for (int i = 1; i < L; ++i)
    EXPECT_LE(live_log[i], live_log[i - 1] - S / 2) << "node " << i << " ran while earlier saved tensors were alive";
  int64_t peak_during_backward = alloc->stats().peak_bytes - base;
  EXPECT_LE(peak_during_backward, after_forward + 3 * S) << "backward held more than the graph needs";
  loss = Tensor();
  int64_t after = alloc->stats().live_bytes - base;
  EXPECT_LE(after, 2 * S + 1024) << "only x and x.grad should remain";
}
