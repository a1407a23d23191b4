// DFL op: forward against an independent double formula, gradcheck in double; anchors and
// bbox2dist/dist2bbox helpers.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/error.h"
#include "ops/dfl.h"
#include "ops/tal.h"
#include "tests/testutil.h"

using engine::Tensor;

TEST(Dfl, ForwardMatchesFormula) {
  const int64_t P = 7, n = 16;
  Tensor x = testutil::random_tensor({P, 4, n}, 3, -3, 3);
  Tensor t = testutil::random_tensor({P, 4}, 4, 0, 14.99);
  auto out = ops::dfl(x, t).to_vector<double>();
  auto xv = x.to_vector<double>(), tv = t.to_vector<double>();
  for (int64_t p = 0; p < P; ++p) {
    double acc = 0;
    for (int s = 0; s < 4; ++s) {
      const double* l = &xv[(p * 4 + s) * n];
      double z = 0;
      for (int k = 0; k < n; ++k) z += std::exp(l[k]);
      double y = tv[p * 4 + s];
      int left = static_cast<int>(y);
      double wl = left + 1 - y;
      acc += -(l[left] - std::log(z)) * wl - (l[left + 1] - std::log(z)) * (1 - wl);
    }
    EXPECT_NEAR(out[p], acc / 4, 1e-12);
  }
}

TEST(Dfl, GradcheckDouble) {
  Tensor x = testutil::random_tensor({5, 4, 16}, 5, -2, 2);
  Tensor t = testutil::random_tensor({5, 4}, 6, 0, 14.99);
  EXPECT_TRUE(testutil::gradcheck([t](const std::vector<Tensor>& in) { return ops::dfl(in[0], t); }, {x}));
}

TEST(Dfl, ShapeErrors) {
  EXPECT_THROW(ops::dfl(Tensor::zeros({3, 4, 16}), Tensor::zeros({2, 4})), engine::ShapeError);
  EXPECT_THROW(ops::dfl(Tensor::zeros({3, 5, 16}), Tensor::zeros({3, 4})), engine::ShapeError);
}

TEST(Anchors, MakeAnchorsAndDistRoundTrip) {
  auto a = ops::make_anchors({{2, 3}, {1, 1}}, {8, 16});
  ASSERT_EQ(a.points.shape(), (engine::Shape{7, 2}));
  auto p = a.points.to_vector<float>();
  auto s = a.strides.to_vector<float>();
  // level 0 row-major y*W+x: anchor 4 = (x=1, y=1); level 1 anchor 6 = (0.5, 0.5) at stride 16.
  EXPECT_FLOAT_EQ(p[8], 1.5f);
  EXPECT_FLOAT_EQ(p[9], 1.5f);
  EXPECT_FLOAT_EQ(p[12], 0.5f);
  EXPECT_FLOAT_EQ(s[6], 16.f);
  EXPECT_FLOAT_EQ(s[5], 8.f);
  Tensor d = testutil::random_tensor({2, 7, 4}, 8, 0, 10).to(engine::DType::F32);
  Tensor box = ops::dist2bbox(d, a.points);
  EXPECT_TRUE(testutil::all_close(ops::bbox2dist(a.points, box, 15), d, 1e-5, 1e-5));
  // Clamp to [0, reg_max - 0.01].
  Tensor far = ops::dist2bbox(Tensor::full({7, 4}, 20.0), a.points);
  auto c = ops::bbox2dist(a.points, far, 15).to_vector<float>();
  for (float v : c) EXPECT_FLOAT_EQ(v, 14.99f);
}

TEST(Targets, PreprocessOrderAndPadding) {
  // image, class, cx, cy, w, h (normalised); image 1 has two rows, image 0 one.
  Tensor t = Tensor::from_vector<float>({1, 2, 0.5f, 0.5f, 0.5f, 0.25f, 0, 1, 0.25f, 0.25f, 0.5f, 0.5f, 1, 0, 0.75f,
                                         0.5f, 0.25f, 0.5f},
                                        {3, 6});
  Tensor o = ops::preprocess_targets(t, 2, 64, 128);
  ASSERT_EQ(o.shape(), (engine::Shape{2, 2, 5}));
  std::vector<float> exp = {1, 0, 0, 64, 32, 0, 0, 0, 0, 0, 2, 32, 24, 96, 40, 0, 80, 16, 112, 48};
  EXPECT_EQ(o.to_vector<float>(), exp);
  EXPECT_EQ(ops::preprocess_targets(Tensor::zeros({0, 6}), 3, 64, 64).shape(), (engine::Shape{3, 0, 5}));
  EXPECT_THROW(ops::preprocess_targets(t, 1, 64, 64), engine::ShapeError);
}
