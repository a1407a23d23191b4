// CUDA copy/fill/axpy/scale entries against their CPU twins (engine/core_kernels.h) on the same random
// input: dtype pairs, odd shapes, transposed / every-other / broadcast views. Label gpu: skips
// without a device (fails with Y9_REQUIRE_GPU=1); compiles to skipping tests in a CPU build.
#include <gtest/gtest.h>

#include "engine/tensor.h"
#include "tests/kernels/cuda_parity.h"
#include "tests/testutil.h"

namespace {

using engine::DType;
using parity::HostBuf;
using parity::Mode;

const std::vector<std::pair<Mode, Mode>> kModePairs = {  // (dst, src)
    {Mode::Contiguous, Mode::Contiguous}, {Mode::Contiguous, Mode::Transposed}, {Mode::Transposed, Mode::Contiguous},
    {Mode::Step2, Mode::Broadcast},       {Mode::Contiguous, Mode::Step2},      {Mode::Step2, Mode::Transposed}};

TEST(CopyCuda, StridedCopyAndConversionsBitwise) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  const std::vector<std::pair<DType, DType>> pairs = {
      {DType::F32, DType::F32}, {DType::F16, DType::F16},  {DType::F64, DType::F64}, {DType::U8, DType::U8},
      {DType::F16, DType::F32}, {DType::F32, DType::F16},  {DType::BF16, DType::F32}, {DType::F32, DType::BF16},
      {DType::F32, DType::F64}, {DType::BF16, DType::F16}, {DType::I32, DType::F32}, {DType::F32, DType::I64}};
  uint64_t seed = 1;
  for (auto [dt, st] : pairs)
    for (const auto& shape : parity::shapes())
      for (auto [dm, sm] : kModePairs) {
        SCOPED_TRACE(std::string(engine::dtype_name(dt)) + "<-" + engine::dtype_name(st) + " dst " +
                     parity::mode_name(dm) + " src " + parity::mode_name(sm) + " ndim " +
                     std::to_string(shape.size()) + " numel " + std::to_string(parity::numel(shape)));
        auto dv = parity::make_view(shape, dm), sv = parity::make_view(shape, sm);
        HostBuf src = parity::random_buf(st, sv.buffer_elems, seed++, -300, 300);
        HostBuf dst = parity::random_buf(dt, dv.buffer_elems, seed++);
        parity::DevBuf dsrc(src), ddst(dst);
        parity::run_cpu(engine::kCopyStrided, dt, dst.data(), dt, dv.layout, src.data(), st, sv.layout);
        parity::run_cuda(engine::kCopyStrided, dt, ddst.data(), dt, dv.layout, dsrc.data(), st, sv.layout);
        EXPECT_TRUE(parity::bitwise_equal(ddst.download(), dst));
      }
#endif
}

TEST(CopyCuda, FillBitwise) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  uint64_t seed = 100;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8, DType::Bool})
    for (const auto& shape : parity::shapes())
      for (Mode m : {Mode::Contiguous, Mode::Transposed, Mode::Step2})
        for (double value : {1.7, -3.25, 0.0}) {
          SCOPED_TRACE(std::string(engine::dtype_name(dt)) + " " + parity::mode_name(m) + " value " +
                       std::to_string(value) + " numel " + std::to_string(parity::numel(shape)));
          auto v = parity::make_view(shape, m);
          HostBuf dst = parity::random_buf(dt, v.buffer_elems, seed++, 0, 100);
          parity::DevBuf ddst(dst);
          parity::run_cpu(engine::kFillStrided, dt, dst.data(), dt, v.layout, value);
          parity::run_cuda(engine::kFillStrided, dt, ddst.data(), dt, v.layout, value);
          EXPECT_TRUE(parity::bitwise_equal(ddst.download(), dst));
        }
#endif
}

#if defined(Y9_WITH_CUDA)
// The CPU twins of axpy/scale cover F32/F64; F16/BF16 reference = the F32 twin on the widened
// buffers, rounded back (what the CUDA kernel computes in float).
void axpy_ref(HostBuf& dst, const HostBuf& src, const parity::View& dv, const parity::View& sv, double alpha) {
  if (dst.dtype == DType::F32 || dst.dtype == DType::F64) {
    parity::run_cpu(engine::kAxpyStrided, dst.dtype, dst.data(), dst.dtype, dv.layout, src.data(), sv.layout, alpha);
    return;
  }
  HostBuf d32 = parity::convert(dst, DType::F32), s32 = parity::convert(src, DType::F32);
  parity::run_cpu(engine::kAxpyStrided, DType::F32, d32.data(), DType::F32, dv.layout, s32.data(), sv.layout, alpha);
  dst = parity::convert(d32, dst.dtype);
}
void scale_ref(HostBuf& dst, const parity::View& v, double value) {
  if (dst.dtype == DType::F32 || dst.dtype == DType::F64) {
    parity::run_cpu(engine::kScaleStrided, dst.dtype, dst.data(), dst.dtype, v.layout, value);
    return;
  }
  HostBuf d32 = parity::convert(dst, DType::F32);
  parity::run_cpu(engine::kScaleStrided, DType::F32, d32.data(), DType::F32, v.layout, value);
  dst = parity::convert(d32, dst.dtype);
}
#endif

TEST(CopyCuda, AxpyAndScaleMatchCpu) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  uint64_t seed = 1000;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (const auto& shape : parity::shapes())
      for (auto [dm, sm] : kModePairs) {
        SCOPED_TRACE(std::string(engine::dtype_name(dt)) + " dst " + parity::mode_name(dm) + " src " +
                     parity::mode_name(sm) + " numel " + std::to_string(parity::numel(shape)));
        auto dv = parity::make_view(shape, dm), sv = parity::make_view(shape, sm);
        HostBuf src = parity::random_buf(dt, sv.buffer_elems, seed++);
        HostBuf dst = parity::random_buf(dt, dv.buffer_elems, seed++);
        parity::DevBuf dsrc(src), ddst(dst);
        axpy_ref(dst, src, dv, sv, -0.75);
        parity::run_cuda(engine::kAxpyStrided, dt, ddst.data(), dt, dv.layout, dsrc.data(), sv.layout, -0.75);
        EXPECT_TRUE(parity::close(ddst.download(), dst, parity::tol_for(dt)));
        scale_ref(dst, dv, 1.3);
        parity::run_cuda(engine::kScaleStrided, dt, ddst.data(), dt, dv.layout, 1.3);
        EXPECT_TRUE(parity::close(ddst.download(), dst, parity::tol_for(dt)));
      }
  HostBuf ib(DType::I32, 4);
  parity::DevBuf dib(ib);
  auto l = parity::row_major({4});
  EXPECT_THROW(parity::run_cuda(engine::kScaleStrided, DType::I32, dib.data(), DType::I32, l, 2.0), engine::ShapeError);
#endif
}

TEST(CopyCuda, TensorTransfersAndMethods) {
  Y9_SKIP_WITHOUT_GPU();
  using engine::Tensor;
  const auto cuda = engine::Device::cuda(0);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(engine::dtype_name(dt));
    Tensor x = testutil::random_tensor({3, 5, 7}, 42, -2, 2, dt);
    Tensor xg = x.to(cuda);
    EXPECT_TRUE(xg.device().is_cuda());
    // Round trip is exact; a permuted view made contiguous on the GPU equals the CPU one.
    EXPECT_TRUE(testutil::all_close(xg.to(engine::Device::cpu()), x, 0, 0));
    Tensor pc = x.permute({2, 0, 1}).contiguous();
    Tensor pg = xg.permute({2, 0, 1}).contiguous();
    EXPECT_TRUE(testutil::all_close(pg, pc, 0, 0));
    // Conversion on the device equals conversion on the host.
    EXPECT_TRUE(testutil::all_close(xg.to(DType::F32), x.to(DType::F32), 0, 0));
  }
  Tensor a = testutil::random_tensor({4, 9}, 7, -1, 1, DType::F32);
  Tensor b = testutil::random_tensor({9}, 8, -1, 1, DType::F32);
  Tensor ag = a.to(cuda), bg = b.to(cuda);
  a.add_(b, 0.5);
  ag.add_(bg, 0.5);
  a.mul_(-2.0);
  ag.mul_(-2.0);
  EXPECT_TRUE(testutil::all_close(ag, a, 8 * FLT_EPSILON, 1e-6));
  Tensor f = Tensor::full({5, 3}, 2.5, DType::F16, cuda);
  EXPECT_TRUE(testutil::all_close(f, Tensor::full({5, 3}, 2.5, DType::F16), 0, 0));
}

}  // namespace
