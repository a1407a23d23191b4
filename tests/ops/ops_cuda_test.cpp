// Op-level CUDA parity (label gpu): the differentiable ops run on CUDA tensors must give the CPU
// twin's forward values and gradients, through the same autograd graph. Also the Philox fills.
#include <gtest/gtest.h>

#include "engine/autograd.h"
#include "engine/rng.h"
#include "ops/ops.h"
#include "tests/testutil.h"

using engine::Device;
using engine::DType;
using engine::Tensor;

namespace {

// Runs f on CPU and CUDA copies of the inputs; compares the output and every input gradient.
void expect_parity(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
                   double rtol, double atol) {
  std::vector<Tensor> cpu, gpu;
  for (const auto& x : inputs) {
    Tensor c = x.detach().clone();
    c.set_requires_grad(true);
    Tensor g = x.detach().to(Device::cuda(0));
    g.set_requires_grad(true);
    cpu.push_back(c);
    gpu.push_back(g);
  }
  Tensor yc = f(cpu), yg = f(gpu);
  EXPECT_EQ(yg.device(), Device::cuda(0));
  EXPECT_TRUE(testutil::all_close(yg.to(Device::cpu()), yc, rtol, atol));
  Tensor w = testutil::random_tensor(yc.shape(), 99, -1, 1, yc.dtype());
  yc.backward(w);
  yg.backward(w.to(Device::cuda(0)));
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE(testutil::all_close(gpu[i].grad().to(Device::cpu()), cpu[i].grad(), rtol, atol)) << "input " << i;
}

}  // namespace

TEST(OpsCuda, ElementwiseBroadcastForwardBackward) {
  Y9_SKIP_WITHOUT_GPU();
  Tensor a = testutil::random_tensor({2, 3, 5, 7}, 1, -2, 2, DType::F32);
  Tensor b = testutil::random_tensor({3, 1, 1}, 2, 0.5, 2, DType::F32);
  // FP32 on both sides; CUDA may contract into FMAs: allow a few ulps (1e-6 relative).
  expect_parity([](const std::vector<Tensor>& x) { return ops::add(x[0], x[1]); }, {a, b}, 1e-6, 1e-6);
  expect_parity([](const std::vector<Tensor>& x) { return ops::mul(x[0].transpose(2, 3), x[1]); }, {a, b}, 1e-6, 1e-6);
  expect_parity([](const std::vector<Tensor>& x) { return ops::div(x[0], x[1]); }, {a, b}, 1e-5, 1e-6);
  expect_parity([](const std::vector<Tensor>& x) { return ops::sub(x[1], x[0]); }, {a, b}, 1e-6, 1e-6);
}

TEST(OpsCuda, ActivationsForwardBackward) {
  Y9_SKIP_WITHOUT_GPU();
  Tensor x = testutil::random_tensor({2, 4, 9, 11}, 3, -6, 6, DType::F32);
  // expf differs by a few ulps between host libm and CUDA's fast path.
  expect_parity([](const std::vector<Tensor>& v) { return ops::silu(v[0]); }, {x}, 1e-5, 1e-6);
  expect_parity([](const std::vector<Tensor>& v) { return ops::sigmoid(v[0].slice(3, 1, 11, 2)); }, {x}, 1e-5, 1e-6);
  expect_parity([](const std::vector<Tensor>& v) { return ops::relu(v[0]); }, {x}, 0, 0);
}

TEST(OpsCuda, PhiloxFillsMatchCpu) {
  Y9_SKIP_WITHOUT_GPU();
  engine::Generator gc(5), gg(5);
  Tensor c = Tensor::empty({1001});
  Tensor g = Tensor::empty({1001}, DType::F32, Device::cuda(0));
  engine::uniform_(c, gc);
  engine::uniform_(g, gg);
  EXPECT_TRUE(testutil::all_close(g.to(Device::cpu()), c, 0, 0));  // same bits: integer-derived
  engine::normal_(c, gc);
  engine::normal_(g, gg);
  EXPECT_TRUE(testutil::all_close(g.to(Device::cpu()), c, 1e-5, 1e-6));  // logf/cosf ulps differ
}
