// The CUDA BatchNorm2d + SiLU entries (kernels/cuda/batch_norm.cu, kBatchNormSiluForward /
// kBatchNormSiluBackward): ops::batch_norm_silu on the device against silu(batch_norm(...)) on the
// device, bit for bit (output, input / weight / bias gradients, running stats), and against the
// CPU twin within float rounding. Label gpu: skips without a device; the emulator build runs it.
#include <gtest/gtest.h>

#include <vector>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "ops/ops.h"
#include "tests/testutil.h"

namespace {

using engine::Device;
using engine::DType;
using engine::Shape;
using engine::Tensor;

/// Output, x / weight / bias gradients and running stats of one forward + backward on `dev`.
std::vector<Tensor> run(const Device& dev, DType dt, const Shape& shape, bool training, bool fused) {
  const int64_t c = shape[1];
  Tensor x = testutil::random_tensor(shape, 81, -4, 4).to(dt).to(dev).detach().set_requires_grad(true);
  Tensor w = testutil::random_tensor({c}, 82, 0.5, 1.5).to(dt).to(dev).detach().set_requires_grad(true);
  Tensor b = testutil::random_tensor({c}, 83).to(dt).to(dev).detach().set_requires_grad(true);
  Tensor gy = testutil::random_tensor(shape, 84).to(dt).to(dev);
  Tensor rm = Tensor::full({c}, 0.25, dt, dev), rv = Tensor::full({c}, 1.5, dt, dev);
  Tensor y = fused ? ops::batch_norm_silu(x, w, b, rm, rv, training, 0.03, 1e-3)
                   : ops::silu(ops::batch_norm(x, w, b, rm, rv, training, 0.03, 1e-3));
  if (fused) EXPECT_EQ(y.grad_fn()->name(), "BatchNormSiluBackward");
  y.backward(gy);
  std::vector<Tensor> r;
  for (const Tensor& t : {y.detach(), x.grad(), w.grad(), b.grad(), rm, rv}) r.push_back(t.to(Device::cpu()));
  return r;
}

TEST(BatchNormSiluCuda, SameBitsAsTwoOpsOnTheDevice) {
  Y9_SKIP_WITHOUT_GPU();
  ASSERT_TRUE(engine::backend(engine::DeviceType::CUDA).supports(kernels::kBatchNormSiluForward, DType::F32));
  for (DType dt : {DType::F32, DType::F64})
    for (const Shape& s : {Shape{3, 4, 20, 21}, Shape{2, 3, 8, 8}})
      for (bool training : {true, false}) {
        SCOPED_TRACE(std::string(engine::dtype_name(dt)) + (training ? " training " : " eval ") +
                     std::to_string(s[2]) + "x" + std::to_string(s[3]));
        const auto a = run(Device::cuda(0), dt, s, training, true), r = run(Device::cuda(0), dt, s, training, false);
        for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(testutil::all_close(a[i], r[i], 0, 0)) << "output " << i;
        // And the CPU twin, within rounding (different summation orders).
        const auto cpu = run(Device::cpu(), dt, s, training, true);
        const double tol = dt == DType::F32 ? 1e-4 : 1e-10;
        for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(testutil::all_close(a[i], cpu[i], tol, tol)) << "cpu " << i;
      }
}

TEST(BatchNormSiluCuda, HalfPrecisionFallsBackToTheTwoOps) {
  Y9_SKIP_WITHOUT_GPU();
  EXPECT_FALSE(engine::backend(engine::DeviceType::CUDA).supports(kernels::kBatchNormSiluForward, DType::F16));
  Tensor x = testutil::random_tensor({2, 3, 8, 8}, 85).to(DType::F16).to(Device::cuda(0));
  Tensor rm = Tensor::zeros({3}, DType::F16, Device::cuda(0)), rv = Tensor::ones({3}, DType::F16, Device::cuda(0));
  Tensor y = ops::batch_norm_silu(x, Tensor(), Tensor(), rm, rv, true, 0.03, 1e-3);
  Tensor r = ops::silu(ops::batch_norm(x, Tensor(), Tensor(), rm.clone(), rv.clone(), true, 0.03, 1e-3));
  EXPECT_TRUE(testutil::all_close(y.to(Device::cpu()), r.to(Device::cpu()), 0, 0));
}

}  // namespace
