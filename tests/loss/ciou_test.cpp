// CIoU op: finite-difference gradient check in double, shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "ops/ciou.h"
#include "tests/testutil.h"

using engine::Tensor;

namespace {
// Random xyxy boxes [n, 4] with positive sizes.
Tensor random_boxes(int64_t n, uint64_t seed) {
  Tensor c = testutil::random_tensor({n, 2}, seed, 0.0, 20.0);
  Tensor s = testutil::random_tensor({n, 2}, seed + 1, 1.0, 10.0);
  auto cv = c.to_vector<double>(), sv = s.to_vector<double>();
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) {
    v.push_back(cv[2 * i] - sv[2 * i] / 2);
    v.push_back(cv[2 * i + 1] - sv[2 * i + 1] / 2);
    v.push_back(cv[2 * i] + sv[2 * i] / 2);
    v.push_back(cv[2 * i + 1] + sv[2 * i + 1] / 2);
  }
  return Tensor::from_vector(v, {n, 4});
}

// CIoU in double with alpha given (frozen), written independently of kernels/common/box.h.
double ciou_ref(const double* a, const double* b, double alpha_frozen, double* alpha_out) {
  const double eps = 1e-7;
  double w1 = a[2] - a[0], h1 = a[3] - a[1] + eps, w2 = b[2] - b[0], h2 = b[3] - b[1] + eps;
  double inter = std::max(0.0, std::min(a[2], b[2]) - std::max(a[0], b[0])) *
                 std::max(0.0, std::min(a[3], b[3]) - std::max(a[1], b[1]));
  double iou = inter / (w1 * h1 + w2 * h2 - inter + eps);
  double cw = std::max(a[2], b[2]) - std::min(a[0], b[0]), ch = std::max(a[3], b[3]) - std::min(a[1], b[1]);
  double c2 = cw * cw + ch * ch + eps;
  double rho2 = (std::pow(b[0] + b[2] - a[0] - a[2], 2) + std::pow(b[1] + b[3] - a[1] - a[3], 2)) / 4;
  double v = 4 / (M_PI * M_PI) * std::pow(std::atan(w2 / h2) - std::atan(w1 / h1), 2);
  double alpha = v / (v - iou + (1 + eps));
  if (alpha_out) *alpha_out = alpha;
  return iou - (rho2 / c2 + v * (alpha_frozen >= 0 ? alpha_frozen : alpha));
}
}  // namespace

TEST(Ciou, GradcheckDoubleFrozenAlpha) {
  // Official backward treats alpha as a constant, so the finite differences freeze alpha too.
  const int64_t n = 60;
  Tensor a = random_boxes(n, 7), b = random_boxes(n, 9);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor c = ops::ciou(a, b);
  Tensor w = testutil::random_tensor({n, 1}, 99);
  c.backward(w);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>(), wv = w.to_vector<double>();
  auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  auto cv = c.to_vector<double>();
  const double h = 1e-6;
  for (int64_t i = 0; i < n; ++i) {
    double alpha = 0;
    double c0 = ciou_ref(&av[4 * i], &bv[4 * i], -1, &alpha);
    EXPECT_NEAR(cv[i], c0, 1e-12);
    for (int which = 0; which < 2; ++which)
      for (int k = 0; k < 4; ++k) {
        std::vector<double> x = which == 0 ? av : bv;
        double* p = &x[4 * i + k];
        double o = *p;
        *p = o + h;
        double fp = which == 0 ? ciou_ref(&x[4 * i], &bv[4 * i], alpha, nullptr) : ciou_ref(&av[4 * i], &x[4 * i], alpha, nullptr);
        *p = o - h;
        double fm = which == 0 ? ciou_ref(&x[4 * i], &bv[4 * i], alpha, nullptr) : ciou_ref(&av[4 * i], &x[4 * i], alpha, nullptr);
        double num = (fp - fm) / (2 * h) * wv[i];
        double ana = which == 0 ? ga[4 * i + k] : gb[4 * i + k];
        EXPECT_NEAR(ana, num, 1e-6 + 1e-5 * std::fabs(num)) << "pair " << i << " box " << which << " coord " << k;
      }
  }
}

TEST(Ciou, GradcheckDoubleSameAspect) {
  // Same aspect ratio: v = alpha = 0, so frozen and true derivatives coincide -> testutil::gradcheck.
  Tensor a = random_boxes(40, 11);
  Tensor b = random_boxes(40, 13);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  for (int i = 0; i < 40; ++i) {
    double w1 = av[4 * i + 2] - av[4 * i], h1 = av[4 * i + 3] - av[4 * i + 1];
    double w2 = bv[4 * i + 2] - bv[4 * i];
    bv[4 * i + 3] = bv[4 * i + 1] + w2 * h1 / w1;
  }
  b = Tensor::from_vector(bv, {40, 4});
  EXPECT_TRUE(testutil::gradcheck([](const std::vector<Tensor>& x) { return ops::ciou(x[0], x[1]); }, {a, b}, 1e-6,
                                  1e-4, 1e-6));
}

TEST(Ciou, ShapeErrors) {
  Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({2, 4}), c = Tensor::zeros({3, 3});
  EXPECT_THROW(ops::ciou(a, b), engine::ShapeError);
  EXPECT_THROW(ops::ciou(c, c), engine::ShapeError);
}
