// ops::cbfuse on the CPU: bitwise equal to the unfused chain it replaces in CBFuse::forward
// (upsample_nearest + add, pieces in order, x last), forward and gradients, in F32 and F64, over
// factors 1 to 8, channel-slice and NHWC-strided pieces, a strided x, inputs without gradient and
// ten pieces; finite differences in F64; ShapeError on bad arguments.
#include <gtest/gtest.h>

#include "engine/error.h"
#include "tests/ops/cbfuse_util.h"

using cbfuse_test::Case;
using engine::Device;
using engine::DType;
using engine::Tensor;

TEST(CBFuse, BitwiseEqualToUnfusedChain) {
  for (DType dt : {DType::F32, DType::F64})
    for (const Case& c : cbfuse_test::cases()) {
      SCOPED_TRACE(c.name + " " + engine::dtype_name(dt));
      const auto fused = cbfuse_test::run(c, Device::cpu(), dt, true);
      const auto unfused = cbfuse_test::run(c, Device::cpu(), dt, false);
      cbfuse_test::expect_same(fused, unfused);
      EXPECT_EQ(fused.out.dtype(), dt);
      EXPECT_TRUE(fused.out.is_contiguous());
    }
}

TEST(CBFuse, FiniteDifferences) {
  // Two pieces (factors 2 and 1) as strided slices, plus a transposed x.
  EXPECT_TRUE(testutil::gradcheck(
      [](const std::vector<Tensor>& v) {
        return ops::cbfuse({ops::split(v[0], {2, 3}, 1)[1], v[1].slice(1, 1, 4)}, v[2].transpose(2, 3));
      },
      {testutil::random_tensor({2, 5, 3, 2}, 1), testutil::random_tensor({2, 4, 6, 4}, 2),
       testutil::random_tensor({2, 3, 4, 6}, 3)}));
}

TEST(CBFuse, NoPiecesAndNoGrad) {
  Tensor x = testutil::random_tensor({1, 2, 4, 4}, 4);
  EXPECT_TRUE(cbfuse_test::bitwise_equal(ops::cbfuse({}, x), x));
  engine::autograd::NoGradGuard ng;
  Tensor p = testutil::random_tensor({1, 2, 2, 2}, 5);
  p.set_requires_grad(true);
  Tensor y = ops::cbfuse({p}, x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(cbfuse_test::bitwise_equal(y, ops::add(ops::upsample_nearest(p, 2), x)));
}

TEST(CBFuse, ShapeErrors) {
  Tensor x = testutil::random_tensor({2, 3, 8, 8}, 6);
  auto piece = [](engine::Shape s) { return testutil::random_tensor(s, 7); };
  EXPECT_THROW(ops::cbfuse({piece({2, 3, 3, 3})}, x), engine::ShapeError);  // not a divisor
  EXPECT_THROW(ops::cbfuse({piece({2, 3, 4, 2})}, x), engine::ShapeError);  // two factors
  EXPECT_THROW(ops::cbfuse({piece({2, 3, 16, 16})}, x), engine::ShapeError);  // larger than x
  EXPECT_THROW(ops::cbfuse({piece({2, 3, 2, 2})}, testutil::random_tensor({2, 3, 0, 0}, 8)),
               engine::ShapeError);  // factor 0
  EXPECT_THROW(ops::cbfuse({piece({2, 4, 4, 4})}, x), engine::ShapeError);  // C
  EXPECT_THROW(ops::cbfuse({piece({1, 3, 4, 4})}, x), engine::ShapeError);  // N
  EXPECT_THROW(ops::cbfuse({piece({2, 3, 4})}, x), engine::ShapeError);     // rank
  EXPECT_THROW(ops::cbfuse({piece({2, 3, 4, 4}).to(DType::F32)}, x), engine::ShapeError);  // dtype
  EXPECT_THROW(ops::cbfuse({Tensor()}, x), engine::ShapeError);
  EXPECT_THROW(ops::cbfuse({piece({2, 3, 4, 4})}, Tensor()), engine::ShapeError);
  EXPECT_THROW(ops::cbfuse({piece({2, 3, 4, 4})}, x.view({2, 3, 64})), engine::ShapeError);
}
