// Tensor metadata, views, copies and dtype conversions on the CPU.
#include <gtest/gtest.h>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "tests/testutil.h"

using engine::DType;
using engine::Tensor;

TEST(Tensor, FactoriesAndMetadata) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (engine::Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
  EXPECT_EQ(Tensor::full({2}, 3.5).to_vector<float>(), (std::vector<float>{3.5f, 3.5f}));
}

TEST(Tensor, PermuteSliceContiguous) {
  Tensor t = Tensor::arange(24).reshape({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(p.shape(), (engine::Shape{4, 2, 3}));
  auto v = p.contiguous().to_vector<float>();
  EXPECT_EQ(v[0], 0);
  EXPECT_EQ(v[1], 4);
  EXPECT_EQ(v[3], 12);
  EXPECT_EQ(v[6], 1);
  Tensor s = t.slice(2, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (engine::Shape{2, 3, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}));
  EXPECT_EQ(t.select(1, -1).to_vector<float>(), (std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23}));
}

TEST(Tensor, ReshapeViewsWhenPossibleAndCopiesOtherwise) {
  Tensor t = Tensor::arange(12).reshape({3, 4});
  Tensor r = t.reshape({2, -1});
  EXPECT_EQ(r.storage(), t.storage());
  Tensor tt = t.transpose(0, 1);
  EXPECT_THROW(tt.view({12}), engine::ShapeError);
  Tensor c = tt.reshape({12});
  EXPECT_NE(c.storage(), t.storage());
  EXPECT_EQ(c.to_vector<float>()[1], 4);
  EXPECT_THROW(t.reshape({5, -1}), engine::ShapeError);
}

TEST(Tensor, DtypeConversionsRoundTrip) {
  Tensor f = Tensor::from_vector<float>({1.0f, -2.5f, 65504.0f, 1e-7f, 0.1f}, {5});
  auto h = f.to(DType::F16).to(DType::F32).to_vector<float>();
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.5f);
  EXPECT_EQ(h[2], 65504.0f);
  EXPECT_NEAR(h[3], 1.1920929e-07f, 1e-12);  // nearest f16 subnormal
  EXPECT_NEAR(h[4], 0.0999755859375f, 1e-9);
  auto b = f.to(DType::BF16).to(DType::F32).to_vector<float>();
  EXPECT_EQ(b[1], -2.5f);
  EXPECT_NEAR(b[4], 0.10009765625f, 1e-9);
  auto i = Tensor::from_vector<float>({1.7f, -2.2f}, {2}).to(DType::I64).to_vector<int64_t>();
  EXPECT_EQ(i, (std::vector<int64_t>{1, -2}));
}

TEST(Tensor, ExpandBroadcastsWithZeroStride) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3}, {3, 1});
  Tensor e = t.expand({2, 3, 4});
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_EQ(e.strides()[2], 0);
  EXPECT_EQ(e.contiguous().to_vector<float>()[5], 2);
  EXPECT_THROW(t.expand({2, 2}), engine::ShapeError);
}

TEST(Tensor, ErrorsNameTheShapes) {
  Tensor t = Tensor::zeros({2, 3});
  try {
    t.permute({0});
    FAIL();
  } catch (const engine::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
}

TEST(Tensor, EmptyTensorsAreContiguous) {
  Tensor e = Tensor::from_vector<float>({}, {2, 0, 5});
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.to_vector<float>().size(), 0u);
}

TEST(Tensor, OverflowingShapesAreRejected) {
  EXPECT_THROW(Tensor::zeros({1LL << 40, 1LL << 40}), engine::ShapeError);
  EXPECT_THROW(Tensor::zeros({1LL << 32, 1LL << 31, 3}), engine::ShapeError);
  EXPECT_THROW(Tensor::empty({1LL << 62}, DType::F64), engine::ShapeError);  // bytes overflow size_t
}
