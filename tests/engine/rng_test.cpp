// Philox4x32-10 against the Random123 known-answer vectors, and the statistics and
// reproducibility of the tensor fills.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/philox.h"
#include "engine/rng.h"

using engine::Philox4x32;

TEST(Philox, KnownAnswerVectors) {
  // Random123 kat_vectors for philox4x32_10.
  Philox4x32 r = engine::philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  r = engine::philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(r.v[0], 0x408f276du);
  EXPECT_EQ(r.v[1], 0x41c83b0eu);
  EXPECT_EQ(r.v[2], 0xa20bc7c6u);
  EXPECT_EQ(r.v[3], 0x6d5451fdu);
  r = engine::philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(r.v[0], 0xd16cfe09u);
  EXPECT_EQ(r.v[1], 0x94fdccebu);
  EXPECT_EQ(r.v[2], 0x5001e420u);
  EXPECT_EQ(r.v[3], 0x24126ea1u);
}

TEST(Generator, FillsAreReproducibleAndAdvance) {
  engine::Generator g1(42), g2(42);
  engine::Tensor a = engine::Tensor::empty({1001});
  engine::Tensor b = engine::Tensor::empty({1001});
  engine::uniform_(a, g1);
  engine::uniform_(b, g2);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  engine::uniform_(b, g2);  // the generator advanced: a different tensor
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());
  engine::Generator g3(42, /*stream_id=*/1);
  engine::uniform_(b, g3);
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());
}

TEST(Generator, UniformAndNormalMoments) {
  engine::Generator g(7);
  engine::Tensor u = engine::Tensor::empty({200000});
  engine::uniform_(u, g, -1.0, 3.0);
  engine::Tensor z = engine::Tensor::empty({200001}, engine::DType::F64);
  engine::normal_(z, g, 0.5, 2.0);
  auto uv = u.to_vector<float>();
  double m = 0, lo = 1e9, hi = -1e9;
  for (float x : uv) {
    m += x;
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
  }
  m /= uv.size();
  EXPECT_NEAR(m, 1.0, 0.02);
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 3.0);
  auto zv = z.to_vector<double>();
  double zm = 0, zs = 0;
  for (double x : zv) zm += x;
  zm /= zv.size();
  for (double x : zv) zs += (x - zm) * (x - zm);
  zs = std::sqrt(zs / zv.size());
  EXPECT_NEAR(zm, 0.5, 0.02);
  EXPECT_NEAR(zs, 2.0, 0.02);
}
