// The CUDA BatchNorm2d + SiLU entries (kernels/cuda/batch_norm.cu, kBatchNormSiluForward /
// kBatchNormSiluBackward): ops::batch_norm_silu on the device against silu(batch_norm(...)) on the
// device, bit for bit (output, input / weight / bias gradients, running stats), and against the
// CPU twin within float rounding. Mixed precision (autocast: F16/BF16 x with FP32 parameters,
// BatchNormShape::f32_params): batch_norm and batch_norm_silu against the FP32 computation on an
// FP32 copy of x rounded back (what ops::batch_norm did before the mixed kernels), and the fused
// entry against the two. Label gpu: skips without a device; the emulator build runs it.
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
  // F16 parameters: not fused (the entry takes F16 only with F32 parameters).
  Tensor x = testutil::random_tensor({2, 3, 8, 8}, 85).to(DType::F16).to(Device::cuda(0));
  Tensor rm = Tensor::zeros({3}, DType::F16, Device::cuda(0)), rv = Tensor::ones({3}, DType::F16, Device::cuda(0));
  Tensor y = ops::batch_norm_silu(x, Tensor(), Tensor(), rm, rv, true, 0.03, 1e-3);
  Tensor r = ops::silu(ops::batch_norm(x, Tensor(), Tensor(), rm.clone(), rv.clone(), true, 0.03, 1e-3));
  EXPECT_TRUE(testutil::all_close(y.to(Device::cpu()), r.to(Device::cpu()), 0, 0));
}

/// Mixed precision: x, gy in `xdt` (F16/BF16), weight, bias and running stats F32. `mode`: 0 =
/// batch_norm, 1 = batch_norm_silu, 2 = silu(batch_norm), 3 = the reference: the FP32 ops on
/// x.to(F32) with y rounded back to `xdt` (differentiable casts).
std::vector<Tensor> run_mixed(DType xdt, const Shape& shape, bool training, int mode) {
  const Device dev = Device::cuda(0);
  const int64_t c = shape[1];
  Tensor x = testutil::random_tensor(shape, 91, -4, 4).to(xdt).to(dev).detach().set_requires_grad(true);
  Tensor w = testutil::random_tensor({c}, 92, 0.5, 1.5).to(DType::F32).to(dev).detach().set_requires_grad(true);
  Tensor b = testutil::random_tensor({c}, 93).to(DType::F32).to(dev).detach().set_requires_grad(true);
  Tensor gy = testutil::random_tensor(shape, 94).to(xdt).to(dev);
  Tensor rm = Tensor::full({c}, 0.25, DType::F32, dev), rv = Tensor::full({c}, 1.5, DType::F32, dev);
  Tensor y;
  if (mode == 0) y = ops::batch_norm(x, w, b, rm, rv, training, 0.03, 1e-3);
  if (mode == 1) y = ops::batch_norm_silu(x, w, b, rm, rv, training, 0.03, 1e-3);
  if (mode == 2) y = ops::silu(ops::batch_norm(x, w, b, rm, rv, training, 0.03, 1e-3));
  if (mode == 3) y = ops::batch_norm(x.to(DType::F32), w, b, rm, rv, training, 0.03, 1e-3).to(xdt);
  EXPECT_EQ(y.dtype(), xdt);
  // (ops::batch_norm_silu fuses maps of 64 elements or more; smaller ones run the two entries.)
  if (mode == 1 && shape[2] * shape[3] >= 64) EXPECT_EQ(y.grad_fn()->name(), "BatchNormSiluBackward");
  if (mode == 0) EXPECT_EQ(y.grad_fn()->name(), "BatchNormBackward");  // no cast node around it
  y.backward(gy);
  EXPECT_EQ(x.grad().dtype(), xdt);
  EXPECT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_EQ(b.grad().dtype(), DType::F32);
  std::vector<Tensor> r;
  for (const Tensor& t : {y.detach(), x.grad(), w.grad(), b.grad(), rm, rv}) r.push_back(t.to(Device::cpu()));
  return r;
}

TEST(BatchNormSiluCuda, MixedPrecisionKernelsMatchTheFp32Computation) {
  Y9_SKIP_WITHOUT_GPU();
  // {80, 2, 8, 8}: 5120 elements per channel, two reduction spans; {3, 2, 1, 1}: 1x1 maps.
  for (DType xdt : {DType::F16, DType::BF16})
    for (const Shape& s : {Shape{3, 4, 20, 21}, Shape{2, 3, 8, 8}, Shape{80, 2, 8, 8}, Shape{3, 2, 1, 1}})
      for (bool training : {true, false}) {
        SCOPED_TRACE(std::string(engine::dtype_name(xdt)) + (training ? " training " : " eval ") +
                     std::to_string(s[2]) + "x" + std::to_string(s[3]));
        const auto mixed = run_mixed(xdt, s, training, 0), ref = run_mixed(xdt, s, training, 3);
        // The same FP32 statistics from the same (exactly widened) x: the running stats and the
        // parameter gradients within FP32 rounding, y and dx within one rounding of x's dtype
        // (a device compiler may contract the FP32 expression differently before the rounding).
        const double half_ulp = xdt == DType::F16 ? 1e-3 : 8e-3;
        EXPECT_TRUE(testutil::all_close(mixed[0], ref[0], half_ulp, half_ulp)) << "y";
        EXPECT_TRUE(testutil::all_close(mixed[1], ref[1], half_ulp, half_ulp)) << "dx";
        for (size_t i = 2; i < mixed.size(); ++i)
          EXPECT_TRUE(testutil::all_close(mixed[i], ref[i], 1e-5, 1e-6)) << "output " << i;
        // Fused BN + SiLU against the two mixed entries: bit for bit.
        const auto fused = run_mixed(xdt, s, training, 1), two = run_mixed(xdt, s, training, 2);
        for (size_t i = 0; i < fused.size(); ++i)
          EXPECT_TRUE(testutil::all_close(fused[i], two[i], 0, 0)) << "fused output " << i;
      }
  // Mixed parameters must agree: F32 weight with an F16 running_mean is refused, naming both.
  const Device dev = Device::cuda(0);
  Tensor x = testutil::random_tensor({2, 3, 8, 8}, 95).to(DType::F16).to(dev);
  Tensor w = Tensor::ones({3}, DType::F32, dev);
  Tensor rm = Tensor::zeros({3}, DType::F16, dev), rv = Tensor::ones({3}, DType::F16, dev);
  try {
    (void)ops::batch_norm(x, w, Tensor(), rm, rv, true, 0.03, 1e-3);
    ADD_FAILURE() << "mixed parameter dtypes must be refused";
  } catch (const engine::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("running_mean"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
}

}  // namespace
