// Elementwise ops: forward against loop references, finite-difference gradients (broadcasting
// and strided views), F32 agreeing with F64, and ShapeError messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "ops/ops.h"
#include "tests/testutil.h"

using engine::DType;
using engine::Shape;
using engine::Tensor;
using testutil::gradcheck;
using testutil::random_tensor;

namespace {

using BinFn = std::function<Tensor(const Tensor&, const Tensor&)>;
using RefFn = std::function<double(double, double)>;

struct BinCase {
  const char* name;
  BinFn f;
  RefFn ref;
};

std::vector<BinCase> bin_cases() {
  return {{"add", ops::add, [](double a, double b) { return a + b; }},
          {"sub", ops::sub, [](double a, double b) { return a - b; }},
          {"mul", ops::mul, [](double a, double b) { return a * b; }},
          {"div", ops::div, [](double a, double b) { return a / b; }}};
}

// Reference broadcast binary op on host vectors (index arithmetic written out, independent of layout_for).
Tensor ref_binary(const Tensor& a, const Tensor& b, const RefFn& f) {
  Shape sa = a.shape(), sb = b.shape();
  size_t n = std::max(sa.size(), sb.size());
  while (sa.size() < n) sa.insert(sa.begin(), 1);
  while (sb.size() < n) sb.insert(sb.begin(), 1);
  Shape so(n);
  for (size_t i = 0; i < n; ++i) so[i] = std::max(sa[i], sb[i]);
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(engine::shape_numel(so)));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t rem = static_cast<int64_t>(i), ia = 0, ib = 0, ma = 1, mb = 1;
    for (int d = static_cast<int>(n) - 1; d >= 0; --d) {
      int64_t c = rem % so[d];
      rem /= so[d];
      ia += (sa[d] == 1 ? 0 : c) * ma;
      ib += (sb[d] == 1 ? 0 : c) * mb;
      ma *= sa[d];
      mb *= sb[d];
    }
    out[i] = f(va[static_cast<size_t>(ia)], vb[static_cast<size_t>(ib)]);
  }
  return Tensor::from_vector(out, so);
}

}  // namespace

TEST(Elementwise, BinaryForwardMatchesReferenceWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4, 5}, {3, 1, 1}}, {{1}, {2, 3}}, {{4, 1}, {1, 5}}, {{2, 3}, {2, 3}}, {{1, 6, 2, 2}, {2, 6, 1, 2}}};
  for (const auto& c : bin_cases()) {
    for (const auto& [sa, sb] : shapes) {
      Tensor a = random_tensor(sa, 1, -2, 2);
      Tensor b = random_tensor(sb, 2, 0.5, 2);  // away from 0 for div
      Tensor y = c.f(a, b);
      EXPECT_TRUE(testutil::all_close(y, ref_binary(a, b, c.ref), 1e-12, 1e-12)) << c.name;
      Tensor a2 = random_tensor(sa, 3, 0.5, 2);  // operand order swapped
      EXPECT_TRUE(testutil::all_close(c.f(b, a2), ref_binary(b, a2, c.ref), 1e-12, 1e-12)) << c.name;
    }
  }
}

TEST(Elementwise, BinaryGradcheckBroadcastAndStrided) {
  for (const auto& c : bin_cases()) {
    // [2,3,4,5] op [3,1,1]
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return c.f(x[0], x[1]); },
                          {random_tensor({2, 3, 4, 5}, 4, -1, 1), random_tensor({3, 1, 1}, 5, 0.5, 1.5)}))
        << c.name;
    // [1] op [4,5] and reversed
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return c.f(x[0], x[1]); },
                          {random_tensor({1}, 6, 0.5, 1.5), random_tensor({4, 5}, 7, 0.5, 1.5)}))
        << c.name;
    // [4,1] op [1,5] (both broadcast)
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return c.f(x[0], x[1]); },
                          {random_tensor({4, 1}, 8, 0.5, 1.5), random_tensor({1, 5}, 9, 0.5, 1.5)}))
        << c.name;
    // strided views: permuted first operand, sliced second operand
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& x) { return c.f(x[0].permute({2, 0, 1}), x[1].slice(1, 0, 6, 2)); },
        {random_tensor({3, 4, 5}, 10, -1, 1), random_tensor({5, 6, 1}, 11, 0.5, 1.5)}))
        << c.name;
  }
}

TEST(Elementwise, OperatorsAndF32AgreesWithF64) {
  Tensor a = random_tensor({2, 3, 8, 8}, 12, -1, 1), b = random_tensor({1, 3, 1, 1}, 13, 0.5, 2);
  Tensor y64 = (a + b) * a - a / b;
  Tensor a32 = a.to(DType::F32), b32 = b.to(DType::F32);
  Tensor y32 = (a32 + b32) * a32 - a32 / b32;
  EXPECT_EQ(y32.dtype(), DType::F32);
  EXPECT_TRUE(testutil::all_close(y32, y64, 1e-5, 1e-6));
  // large broadcast (threaded path) agrees with the reference too
  Tensor big = random_tensor({2, 16, 40, 40}, 14, -1, 1, DType::F32), bias = random_tensor({1, 16, 1, 1}, 15, -1, 1, DType::F32);
  EXPECT_TRUE(testutil::all_close(ops::add(big, bias), ref_binary(big, bias, [](double x, double y) { return x + y; }),
                                  1e-6, 1e-6));
}

namespace {
struct UnCase {
  const char* name;
  std::function<Tensor(const Tensor&)> f;
  std::function<double(double)> ref;
  double lo, hi;
};
std::vector<UnCase> un_cases() {
  return {{"add_scalar", [](const Tensor& x) { return ops::add_scalar(x, 1.5); }, [](double v) { return v + 1.5; }, -1, 1},
          {"mul_scalar", [](const Tensor& x) { return ops::mul_scalar(x, -2.5); }, [](double v) { return v * -2.5; }, -1, 1},
          {"neg", [](const Tensor& x) { return ops::neg(x); }, [](double v) { return -v; }, -1, 1},
          {"exp", [](const Tensor& x) { return ops::exp(x); }, [](double v) { return std::exp(v); }, -1, 1},
          {"log", [](const Tensor& x) { return ops::log(x); }, [](double v) { return std::log(v); }, 0.5, 2},
          {"sqrt", [](const Tensor& x) { return ops::sqrt(x); }, [](double v) { return std::sqrt(v); }, 0.5, 2},
          {"pow_scalar", [](const Tensor& x) { return ops::pow_scalar(x, 2.5); }, [](double v) { return std::pow(v, 2.5); }, 0.5, 2},
          {"pow_scalar_int", [](const Tensor& x) { return ops::pow_scalar(x, 3.0); }, [](double v) { return v * v * v; }, -1, 1},
          {"clamp", [](const Tensor& x) { return ops::clamp(x, -0.3, 0.4); },
           [](double v) { return std::min(std::max(v, -0.3), 0.4); }, -1, 1}};
}
}  // namespace

TEST(Elementwise, UnaryForwardGradcheckAndF32) {
  for (const auto& c : un_cases()) {
    Tensor x = random_tensor({3, 4, 5}, 20, c.lo, c.hi);
    auto xv = x.to_vector<double>();
    auto yv = c.f(x).to_vector<double>();
    for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], c.ref(xv[i]), 1e-12) << c.name;
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return c.f(in[0]); }, {x})) << c.name;
    // strided: transposed + sliced view
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return c.f(in[0].transpose(0, 2).slice(0, 1, 5, 2)); },
                          {random_tensor({3, 4, 5}, 21, c.lo, c.hi)}))
        << c.name;
    EXPECT_TRUE(testutil::all_close(c.f(x.to(DType::F32)), c.f(x), 1e-5, 1e-6)) << c.name;
  }
}

TEST(Elementwise, ClampGradientIsOneAtBounds) {
  Tensor x = Tensor::from_vector<double>({-1.0, 0.0, 1.0, 2.0}, {4});
  x.set_requires_grad(true);
  ops::sum(ops::clamp(x, 0.0, 1.0)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 1, 0}));
}

TEST(Elementwise, ShapeErrorsNameOpAndShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  try {
    ops::add(a, b);
    FAIL() << "no throw";
  } catch (const engine::ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  }
  try {
    ops::mul(a, Tensor::zeros({2, 3}, DType::F64));
    FAIL() << "no throw";
  } catch (const engine::ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("mul"), std::string::npos) << m;
    EXPECT_NE(m.find("f64"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::exp(Tensor::zeros({2}, DType::I32)), engine::ShapeError);
}
