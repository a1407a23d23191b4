// CUDA spatial, concat and softmax entries (kernels/cuda/spatial.cu, concat.cu, softmax.cu) through
// their ops, against the CPU F64 twin run on the same inputs rounded to the swept dtype, for the
// cases the generic sweep (backend_ops_test) does not reach: every pooling geometry the model uses
// plus odd/strided shapes, ties and NaN in max pooling, f16/bf16 argmax on rounded inputs, upsample
// by 3, concat of more pieces than one launch takes (with non-contiguous pieces and a piece without
// gradient), softmax rows longer than a warp's and a block's share, and the column path.
// Label gpu: skips without a device (fails with Y9_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/tensor.h"
#include "kernels/common/linalg.h"
#include "ops/ops.h"
#include "tests/testutil.h"

namespace {

using engine::Device;
using engine::DType;
using engine::Tensor;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

/// (rtol, atol) of a dtype's result against the F64 computation on the same (rounded) inputs:
/// float accumulation for F32, one output rounding (plus float sums) for F16/BF16.
std::pair<double, double> tol(DType dt) {
  switch (dt) {
    case DType::F64: return {1e-12, 1e-12};
    case DType::F32: return {2e-6, 1e-6};
    case DType::F16: return {2e-3, 1e-4};
    default: return {1.6e-2, 1e-3};
  }
}

/// Runs f on the CUDA device in `dt` and on the CPU in F64 with the inputs (given in F64) rounded
/// to dt; compares the outputs and the gradients of the inputs flagged in `diff` (weights W, rounded
/// to dt, for the objective sum(f(x) * W)). Also checks that a second device run is bitwise equal.
void expect_parity(const Fn& f, const std::vector<Tensor>& inputs, DType dt, const std::vector<bool>& diff = {}) {
  SCOPED_TRACE(engine::dtype_name(dt));
  const auto [rtol, atol] = tol(dt);
  std::vector<Tensor> cpu, gpu;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool d = diff.empty() || diff[i];
    Tensor r = inputs[i].to(dt);
    Tensor c = r.to(DType::F64).detach().clone();
    Tensor g = r.to(Device::cuda(0)).detach().clone();
    c.set_requires_grad(d);
    g.set_requires_grad(d);
    cpu.push_back(c);
    gpu.push_back(g);
  }
  Tensor yc = f(cpu), yg = f(gpu);
  ASSERT_EQ(yg.device(), Device::cuda(0));
  ASSERT_EQ(yg.dtype(), dt);
  EXPECT_TRUE(testutil::all_close(yg.to(Device::cpu()).to(DType::F64), yc, rtol, atol)) << "forward";
  {
    engine::autograd::NoGradGuard ng;
    std::vector<Tensor> again;
    for (const auto& g : gpu) again.push_back(g.detach());
    Tensor y2 = f(again).to(Device::cpu());
    EXPECT_TRUE(testutil::all_close(y2.to(DType::F64), yg.to(Device::cpu()).to(DType::F64), 0, 0)) << "rerun";
  }
  if (!yc.requires_grad()) return;
  Tensor w = testutil::random_tensor(yc.shape(), 99, -1, 1, DType::F64).to(dt);
  yc.backward(w.to(DType::F64));
  yg.backward(w.to(Device::cuda(0)));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu[i].requires_grad() || cpu[i].numel() == 0) continue;
    ASSERT_TRUE(gpu[i].grad().defined()) << "input " << i;
    EXPECT_TRUE(testutil::all_close(gpu[i].grad().to(Device::cpu()).to(DType::F64), cpu[i].grad(), 2 * rtol,
                                    2 * atol))
        << "gradient of input " << i;
  }
}

const std::vector<DType> kDtypes = {DType::F64, DType::F32, DType::F16, DType::BF16};

}  // namespace

TEST(SpatialCuda, PoolingGeometries) {
  Y9_SKIP_WITHOUT_GPU();
  struct Case {
    int64_t k, s, p;
  };
  // SPPELAN (5,1,2), ADown (3,2,1) and (2,1,0), plus a stride larger than the kernel and k = 1.
  const std::vector<Case> cases = {{5, 1, 2}, {3, 2, 1}, {2, 1, 0}, {2, 3, 1}, {1, 1, 0}, {3, 3, 0}, {4, 2, 2}};
  Tensor x = testutil::random_tensor({2, 3, 9, 7}, 21, -2, 2);
  for (DType dt : kDtypes)
    for (const Case& c : cases) {
      SCOPED_TRACE("k " + std::to_string(c.k) + " s " + std::to_string(c.s) + " p " + std::to_string(c.p));
      expect_parity([c](const std::vector<Tensor>& v) { return ops::max_pool2d(v[0], c.k, c.s, c.p); }, {x}, dt);
      expect_parity([c](const std::vector<Tensor>& v) { return ops::avg_pool2d(v[0], c.k, c.s, c.p); }, {x}, dt);
      // A strided (NHWC-permuted) input view.
      expect_parity(
          [c](const std::vector<Tensor>& v) { return ops::max_pool2d(v[0].permute({0, 3, 1, 2}), c.k, c.s, c.p); },
          {x.permute({0, 2, 3, 1}).contiguous()}, dt);
      expect_parity(
          [c](const std::vector<Tensor>& v) { return ops::avg_pool2d(v[0].transpose(2, 3), c.k, c.s, c.p); }, {x},
          dt);
    }
}

TEST(SpatialCuda, MaxPoolTiesAndNaN) {
  Y9_SKIP_WITHOUT_GPU();
  // Values from {-1, 0, 1}: many ties inside every window; the first maximum in row-major window
  // order must win on both backends (the gradient goes to it alone).
  std::vector<double> v(2 * 2 * 8 * 8);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(int64_t((i * 7 + i / 5) % 3) - 1);
  Tensor ties = Tensor::from_vector(v, {2, 2, 8, 8});
  for (DType dt : kDtypes) {
    expect_parity([](const std::vector<Tensor>& x) { return ops::max_pool2d(x[0], 3, 2, 1); }, {ties}, dt);
    expect_parity([](const std::vector<Tensor>& x) { return ops::max_pool2d(x[0], 5, 1, 2); }, {ties}, dt);
  }
  // A NaN wins its windows (PyTorch): same NaN positions, same argmax (gradient) on both backends.
  v[10] = std::numeric_limits<double>::quiet_NaN();
  Tensor nan = Tensor::from_vector(v, {2, 2, 8, 8});
  for (DType dt : {DType::F32, DType::F16}) {
    Tensor yc = ops::max_pool2d(nan.to(dt).to(DType::F64), 3, 1, 1);
    Tensor yg = ops::max_pool2d(nan.to(dt).to(Device::cuda(0)), 3, 1, 1).to(Device::cpu()).to(DType::F64);
    auto a = yc.to_vector<double>(), b = yg.to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(std::isnan(a[i]), std::isnan(b[i])) << i;
      if (!std::isnan(a[i])) EXPECT_EQ(a[i], b[i]) << i;
    }
  }
}

TEST(SpatialCuda, MaxPoolRoundedInputsLikeTheSweep) {
  Y9_SKIP_WITHOUT_GPU();
  // The sweep's max_pool2d input: rounded to f16/bf16 some windows hold ties that F64 does not
  // have, so the argmax (and the gradient) may differ from the F64 reference; on the same rounded
  // values the device must agree with the CPU exactly.
  Tensor x = testutil::random_tensor({2, 3, 7, 8}, 61);
  for (DType dt : kDtypes)
    expect_parity([](const std::vector<Tensor>& v) { return ops::max_pool2d(v[0], 3, 2, 1); }, {x}, dt);
}

TEST(SpatialCuda, UpsampleNearest) {
  Y9_SKIP_WITHOUT_GPU();
  Tensor x = testutil::random_tensor({2, 3, 5, 3}, 22);
  for (DType dt : kDtypes)
    for (int64_t s : {1, 2, 3}) {
      SCOPED_TRACE("scale " + std::to_string(s));
      expect_parity([s](const std::vector<Tensor>& v) { return ops::upsample_nearest(v[0], s); }, {x}, dt);
      expect_parity([s](const std::vector<Tensor>& v) { return ops::upsample_nearest(v[0].transpose(1, 3), s); },
                    {x}, dt);
    }
}

TEST(SpatialCuda, ConcatManyPiecesStridedAndWithoutGradient) {
  Y9_SKIP_WITHOUT_GPU();
  // 11 pieces (more than one launch's group of 8), one of size 0 along the dim, one a transposed
  // view, one without gradient (its gradient piece is null in the backward entry).
  std::vector<Tensor> xs;
  const std::vector<int64_t> sizes = {3, 1, 0, 4, 2, 5, 1, 1, 2, 3, 2};
  for (size_t k = 0; k < sizes.size(); ++k)
    xs.push_back(testutil::random_tensor({2, sizes[k], 3, 5}, 30 + k));
  xs[3] = testutil::random_tensor({2, 5, 3, 4}, 29);  // used as transpose(1, 3): [2, 4, 3, 5]
  std::vector<bool> diff(xs.size(), true);
  diff[5] = false;
  for (DType dt : kDtypes) {
    for (int64_t dim : {1, 0, 3}) {
      SCOPED_TRACE("dim " + std::to_string(dim));
      if (dim == 1) {
        expect_parity(
            [](const std::vector<Tensor>& v) {
              std::vector<Tensor> p = v;
              p[3] = v[3].transpose(1, 3);
              return ops::concat(p, 1);
            },
            xs, dt, diff);
      } else {
        // Along another dim: pieces of one shape [2, 3, 3, 5] (the first three and a strided one).
        std::vector<Tensor> same = {testutil::random_tensor({2, 3, 3, 5}, 40), testutil::random_tensor({2, 3, 3, 5}, 41),
                                    testutil::random_tensor({2, 5, 3, 3}, 42)};
        expect_parity(
            [dim](const std::vector<Tensor>& v) { return ops::concat({v[0], v[1], v[2].transpose(1, 3)}, dim); },
            same, dt, {true, false, true});
      }
    }
  }
}

/// The softmax_backward entry alone on y = softmax(x) (or log_softmax) and dy, both given in the
/// swept dtype: the device entry against the CPU F64 entry on the same rounded values. (Through
/// autograd, f16/bf16 gradients also carry the rounding of the forward output y that the backward
/// reads, which log_softmax's dy - exp(y) * sum(dy) amplifies; that is the op's formulation, shared
/// by the CPU twin, not a kernel error, so the entry is checked on its own inputs here.)
void expect_softmax_backward_parity(const engine::Shape& shape, int64_t dim, bool log, DType dt) {
  SCOPED_TRACE(std::string(engine::dtype_name(dt)) + (log ? " log_softmax" : " softmax") + " backward");
  const auto [rtol, atol] = tol(dt);
  const int64_t nd = static_cast<int64_t>(shape.size()), d = dim < 0 ? dim + nd : dim;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= shape[i];
  for (int64_t i = d + 1; i < nd; ++i) inner *= shape[i];
  const int64_t n = shape[d];
  Tensor x = testutil::random_tensor(shape, 51, -4, 4);
  Tensor y = (log ? ops::log_softmax(x, d) : ops::softmax(x, d)).to(dt).contiguous();
  Tensor dy = testutil::random_tensor(shape, 52, -1, 1).to(dt).contiguous();
  Tensor y64 = y.to(DType::F64).contiguous(), dy64 = dy.to(DType::F64).contiguous();
  Tensor ref = Tensor::empty(shape, DType::F64, Device::cpu());
  auto kc = engine::kernel(kernels::kSoftmaxBackward, DType::F64, Device::cpu());
  kc.fn(kc.ctx, DType::F64, y64.data_ptr(), dy64.data_ptr(), ref.data_ptr(), outer, n, inner, log);
  Tensor yg = y.to(Device::cuda(0)), dyg = dy.to(Device::cuda(0));
  Tensor got = Tensor::empty(shape, dt, Device::cuda(0));
  auto kg = engine::kernel(kernels::kSoftmaxBackward, dt, Device::cuda(0));
  kg.fn(kg.ctx, dt, yg.data_ptr(), dyg.data_ptr(), got.data_ptr(), outer, n, inner, log);
  // The sum over n is of terms up to |dy| (softmax: |dy * y|): float accumulation adds about
  // n * 2^-24 of their size for the narrow dtypes; atol covers it for the rows used here.
  EXPECT_TRUE(testutil::all_close(got.to(Device::cpu()).to(DType::F64), ref, rtol, atol));
}

TEST(SpatialCuda, SoftmaxPaths) {
  Y9_SKIP_WITHOUT_GPU();
  struct Case {
    std::vector<int64_t> shape;
    int64_t dim;
  };
  // Rows (inner == 1): 1, a warp's multiple, just over a warp row's limit (block path) and a long
  // odd row; columns (inner > 1): DFL's [b, 16, 4, a] over dim 1, and a short inner.
  const std::vector<Case> cases = {{{3, 1}, 1},        {{5, 64}, -1},    {{2, 1025}, 1}, {{1, 2999}, 0},
                                   {{2, 16, 4, 9}, 1}, {{3, 700, 2}, 1}, {{7, 33}, 1}};
  for (DType dt : kDtypes)
    for (const Case& c : cases) {
      SCOPED_TRACE("shape " + engine::shape_str(c.shape) + " dim " + std::to_string(c.dim));
      Tensor x = testutil::random_tensor(c.shape, 50, -4, 4);
      const int64_t d = c.dim;
      // Forward and (F64/F32) autograd gradients through the ops; the narrow dtypes' backward entry
      // on its own rounded inputs.
      const bool wide = dt == DType::F64 || dt == DType::F32;
      expect_parity([d](const std::vector<Tensor>& v) { return ops::softmax(v[0], d); }, {x}, dt, {wide});
      expect_parity([d](const std::vector<Tensor>& v) { return ops::log_softmax(v[0], d); }, {x}, dt, {wide});
      for (bool log : {false, true}) expect_softmax_backward_parity(c.shape, d, log, dt);
    }
}
