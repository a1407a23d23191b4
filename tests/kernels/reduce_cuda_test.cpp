// CUDA row sums (the sum_rows entry) against the CPU twin on the same random
// input, short rows (warp path) and long rows (block path), and ops::sum/mean on CUDA tensors.
// Label gpu: skips without a device (fails with Y9_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "engine/tensor.h"
#include "ops/reduce.h"
#include "tests/kernels/cuda_parity.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using parity::HostBuf;

TEST(ReduceCuda, SumRowsMatchesCpuTwin) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{1, 1},    {7, 13},  {33, 1000}, {5, 1024}, {5, 1025},
                                                          {3, 5000}, {1000, 3}, {2, 100003}, {4, 0},   {1, 1 << 20}};
  uint64_t seed = 5;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (auto [rows, n] : sizes)
      for (double scale : {1.0, 1.0 / 3}) {
        SCOPED_TRACE(std::string(engine::dtype_name(dt)) + " rows " + std::to_string(rows) + " n " +
                     std::to_string(n) + " scale " + std::to_string(scale));
        HostBuf in = parity::random_buf(dt, rows * n, seed++);
        // CPU twin in its dtype (F32/F64); F16/BF16 through the F32 twin, rounded back.
        HostBuf ref(dt == DType::F64 ? DType::F64 : DType::F32, rows);
        if (dt == DType::F64) {
          parity::run_cpu(engine::kSumRows, DType::F64, in.data(), ref.data(), DType::F64, rows, n, scale);
        } else {
          HostBuf in32 = parity::convert(in, DType::F32);
          parity::run_cpu(engine::kSumRows, DType::F32, in32.data(), ref.data(), DType::F32, rows, n, scale);
        }
        ref = parity::convert(ref, dt);
        HostBuf out = parity::random_buf(dt, rows, seed++);
        parity::DevBuf din(in), dout(out);
        parity::run_cuda(engine::kSumRows, dt, din.data(), dout.data(), dt, rows, n, scale);
        HostBuf got = dout.download();
        // Float accumulation (double on the CPU): allow 32 FLT_EPSILON of the row's sum of |x|
        // (error of ~n/32 sequential adds plus a 5-level tree; observed far below), plus the
        // output rounding of the dtype.
        auto x = parity::to_doubles(in);
        auto g = parity::to_doubles(got), r = parity::to_doubles(ref);
        const double acc_eps = dt == DType::F64 ? 1e-14 : 32 * FLT_EPSILON;
        for (int64_t i = 0; i < rows; ++i) {
          double abs_sum = 0;
          for (int64_t j = 0; j < n; ++j) abs_sum += std::fabs(x[i * n + j]);
          double tol = acc_eps * abs_sum * scale + parity::tol_for(dt).eps * std::fabs(r[i]) + 1e-7;
          ASSERT_LE(std::fabs(g[i] - r[i]), tol) << "row " << i << ": cuda " << g[i] << " cpu " << r[i];
        }
        // Deterministic: a second run is bitwise equal.
        parity::run_cuda(engine::kSumRows, dt, din.data(), dout.data(), dt, rows, n, scale);
        EXPECT_TRUE(parity::bitwise_equal(dout.download(), got));
      }
#endif
}

TEST(ReduceCuda, OpsSumAndMeanOnDevice) {
  Y9_SKIP_WITHOUT_GPU();
  using engine::Tensor;
  const auto cuda = engine::Device::cuda(0);
  Tensor x = testutil::random_tensor({3, 17, 5, 9}, 11, -1, 1, DType::F32);
  Tensor xg = x.to(cuda);
  const std::vector<std::vector<int64_t>> dimsets = {{}, {1}, {0, 2}, {-1}, {1, 3}};
  for (const auto& dims : dimsets)
    for (bool keep : {false, true}) {
      SCOPED_TRACE("dims " + std::to_string(dims.size()) + " keepdim " + std::to_string(keep));
      EXPECT_TRUE(testutil::all_close(ops::sum(xg, dims, keep), ops::sum(x, dims, keep), 16 * FLT_EPSILON, 1e-5));
      EXPECT_TRUE(testutil::all_close(ops::mean(xg, dims, keep), ops::mean(x, dims, keep), 16 * FLT_EPSILON, 1e-6));
    }
  // F16 on the device: compare with the F32 CPU sum of the same (rounded) values.
  Tensor h = x.to(DType::F16);
  Tensor hs = ops::sum(h.to(cuda), {1});
  EXPECT_EQ(hs.dtype(), DType::F16);
  EXPECT_TRUE(testutil::all_close(hs, ops::sum(h.to(DType::F32), {1}), 1.0 / 1024, 1e-3));
  // Backward on the device: d(mean)/dx = 1/n everywhere.
  Tensor xr = xg.clone().detach();
  xr.set_requires_grad(true);
  ops::mean(xr, {0, 2}).backward(Tensor::ones({17, 9}, DType::F32, cuda));
  EXPECT_TRUE(testutil::all_close(xr.grad(), Tensor::full({3, 17, 5, 9}, 1.0 / 15), 1e-6, 1e-7));
}

}  // namespace
