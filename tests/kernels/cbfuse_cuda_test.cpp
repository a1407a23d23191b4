// CUDA ops::cbfuse (kernels/cuda/cbfuse.cu) on the shared cases (tests/ops/cbfuse_util.h): bitwise
// equal to the CPU twin on the same inputs (F32, F64) and to the unfused CUDA chain it replaces
// (upsample_nearest + add; F32, F64, F16, BF16: the per-add rounding of F16/BF16 included),
// forward and gradients, with ten pieces (two forward launches, two backward launches).
// Label gpu: skips without a device (fails with Y9_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include "tests/ops/cbfuse_util.h"

using cbfuse_test::Case;
using engine::Device;
using engine::DType;

TEST(CBFuseCuda, MatchesCpuTwin) {
  Y9_SKIP_WITHOUT_GPU();
  for (DType dt : {DType::F32, DType::F64})
    for (const Case& c : cbfuse_test::cases()) {
      SCOPED_TRACE(c.name + " " + engine::dtype_name(dt));
      cbfuse_test::expect_same(cbfuse_test::run(c, Device::cuda(0), dt, true),
                               cbfuse_test::run(c, Device::cpu(), dt, true));
    }
}

TEST(CBFuseCuda, MatchesUnfusedChain) {
  Y9_SKIP_WITHOUT_GPU();
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (const Case& c : cbfuse_test::cases()) {
      SCOPED_TRACE(c.name + " " + engine::dtype_name(dt));
      const auto fused = cbfuse_test::run(c, Device::cuda(0), dt, true);
      cbfuse_test::expect_same(fused, cbfuse_test::run(c, Device::cuda(0), dt, false));
      EXPECT_EQ(fused.out.device(), Device::cuda(0));
      EXPECT_EQ(fused.out.dtype(), dt);
    }
}
