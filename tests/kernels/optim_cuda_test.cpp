// CUDA fused optimizer / EMA / gradient-norm entries (kernels/cuda/optim.cu) and the CUDA
// BatchNorm entries (kernels/cuda/batch_norm.cu) against their CPU twins on the same inputs:
// optimizer steps over many ranges with gaps (more than one launch's table of ranges), sum_squares
// over ranges longer than one block's chunk and empty ranges, BatchNorm over more than one block's
// worth of N*H*W per channel (and more than one span per channel) in F32, F16, BF16 and F64, and
// synchronised BatchNorm through a stand-in all-reduce; the clipping entries (grad_norm_from_sums,
// clip_by_norm) bitwise equal to their CPU twins, and (emulator) clip_grad_norm_async with no
// device-to-host copy.
// Label gpu: skips without a device (fails with Y9_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cfloat>
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "apps/training/clip.h"
#include "apps/training/param_store.h"
#include "engine/autograd.h"
#include "engine/cuda_runtime.h"
#include "kernels/common/batch_norm.h"
#include "kernels/common/optim.h"
#include "tests/kernels/cuda_parity.h"
#include "tests/testutil.h"

#if defined(Y9_CUDA_EMULATOR)
#include "cuda_emu/device.h"
#endif

namespace {

using engine::DType;
using engine::Tensor;
using kernels::FlatRange;
using parity::HostBuf;

float* f32(HostBuf& h) { return static_cast<float*>(h.data()); }

/// `count` ranges of varied lengths (some empty) with gaps between them, and the buffer length.
std::vector<FlatRange> gapped_ranges(int count, int64_t* total) {
  std::vector<FlatRange> rg;
  int64_t off = 3;
  for (int r = 0; r < count; ++r) {
    const int64_t n = r % 9 == 4 ? 0 : (r * 37) % 61 + 1 + (r == 5 ? 9000 : 0);
    rg.push_back({off, n});
    off += n + (r % 3 == 0 ? 0 : 2 + r % 5);  // some ranges touch, most leave a gap
  }
  *total = off + 4;
  return rg;
}

/// |got - ref| <= atol + rtol*|ref| for every element (gaps included).
::testing::AssertionResult near(const HostBuf& got, const HostBuf& ref, double rtol, double atol) {
  return parity::close(got, ref, parity::Tol{rtol, atol});
}

// --- optimizer steps --------------------------------------------------------------------------

TEST(OptimCuda, StepsOverManyRangesMatchCpuTwins) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  for (int count : {1, 7, 150}) {  // 150 ranges: more than one launch's table (96)
    SCOPED_TRACE("ranges " + std::to_string(count));
    int64_t n = 0;
    const std::vector<FlatRange> rg = gapped_ranges(count, &n);
    const int64_t nr = static_cast<int64_t>(rg.size());
    const uint64_t seed = 1000 + count;
    HostBuf p0 = parity::random_buf(DType::F32, n, seed), g = parity::random_buf(DType::F32, n, seed + 1);
    HostBuf s1 = parity::random_buf(DType::F32, n, seed + 2, -1, 1);
    HostBuf s2 = parity::random_buf(DType::F32, n, seed + 3, 0, 1), s3 = parity::random_buf(DType::F32, n, seed + 4, 0, 1);
    parity::DevBuf dg(g);

    // SGD: momentum + nesterov + weight decay, the first step, and momentum 0 without a buffer.
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE("sgd variant " + std::to_string(variant));
      kernels::SgdScalars s{0.05f, variant == 2 ? 0.f : 0.9f, 0.8f, 5e-4f, variant == 0, variant == 1};
      HostBuf p = p0, buf = s1;
      parity::DevBuf dp(p), dbuf(buf);
      parity::run_cpu(kernels::kSgdStep, DType::F32, f32(p), f32(g), variant == 2 ? nullptr : f32(buf), rg.data(), nr,
                      s);
      parity::run_cuda(kernels::kSgdStep, DType::F32, static_cast<float*>(dp.data()),
                       static_cast<const float*>(dg.data()), variant == 2 ? nullptr : static_cast<float*>(dbuf.data()),
                       rg.data(), nr, s);
      EXPECT_TRUE(near(dp.download(), p, 1e-6, 1e-6)) << "p";
      EXPECT_TRUE(near(dbuf.download(), buf, 1e-6, 1e-6)) << "momentum buffer";
    }
    // Adam / AdamW, with and without amsgrad.
    for (int variant = 0; variant < 2; ++variant) {
      SCOPED_TRACE("adam variant " + std::to_string(variant));
      kernels::AdamScalars s;
      s.weight_decay = 0.01f;
      s.decoupled = variant == 1;
      s.decay_factor = 0.9999f;
      s.amsgrad = variant == 1;
      s.step_size = 1e-3f / 0.271f;
      s.bias_correction2_sqrt = 0.0632f;
      HostBuf p = p0, m = s1, v = s2, vmax = s3;
      parity::DevBuf dp(p), dm(m), dv(v), dvmax(vmax);
      parity::run_cpu(kernels::kAdamStep, DType::F32, f32(p), f32(g), f32(m), f32(v), s.amsgrad ? f32(vmax) : nullptr,
                      rg.data(), nr, s);
      parity::run_cuda(kernels::kAdamStep, DType::F32, static_cast<float*>(dp.data()),
                       static_cast<const float*>(dg.data()), static_cast<float*>(dm.data()),
                       static_cast<float*>(dv.data()), s.amsgrad ? static_cast<float*>(dvmax.data()) : nullptr,
                       rg.data(), nr, s);
      EXPECT_TRUE(near(dp.download(), p, 1e-6, 1e-6)) << "p";
      EXPECT_TRUE(near(dm.download(), m, 1e-6, 1e-6)) << "exp_avg";
      EXPECT_TRUE(near(dv.download(), v, 1e-6, 1e-6)) << "exp_avg_sq";
      EXPECT_TRUE(near(dvmax.download(), vmax, 1e-6, 1e-6)) << "max_exp_avg_sq";
    }
    // Lion.
    {
      kernels::LionScalars s{1e-4f, 0.9f, 0.99f, 0.1f, 0.01f, 0.99999f};
      HostBuf p = p0, m = s1;
      parity::DevBuf dp(p), dm(m);
      parity::run_cpu(kernels::kLionStep, DType::F32, f32(p), f32(g), f32(m), rg.data(), nr, s);
      parity::run_cuda(kernels::kLionStep, DType::F32, static_cast<float*>(dp.data()),
                       static_cast<const float*>(dg.data()), static_cast<float*>(dm.data()), rg.data(), nr, s);
      EXPECT_TRUE(near(dp.download(), p, 1e-6, 1e-6)) << "lion p";
      EXPECT_TRUE(near(dm.download(), m, 1e-6, 1e-6)) << "lion exp_avg";
    }
    // EMA over the whole buffer.
    {
      HostBuf e = p0;
      parity::DevBuf de(e);
      parity::run_cpu(kernels::kEmaUpdate, DType::F32, f32(e), f32(g), n, 0.9999f, 1e-4f);
      parity::run_cuda(kernels::kEmaUpdate, DType::F32, static_cast<float*>(de.data()),
                       static_cast<const float*>(dg.data()), n, 0.9999f, 1e-4f);
      EXPECT_TRUE(near(de.download(), e, 1e-6, 1e-6)) << "ema";
    }
  }
#endif
}

// --- sum_squares ------------------------------------------------------------------------------

TEST(OptimCuda, SumSquaresMatchesCpuTwinAndIsDeterministic) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  const int64_t n = 60000;
  HostBuf g = parity::random_buf(DType::F32, n, 77);
  parity::DevBuf dg(g);
  // Empty ranges first, inside, and last; ranges of one and of several 8192-element chunks.
  std::vector<std::vector<FlatRange>> sets = {
      {{0, 0}, {0, 5}, {10, 20000}, {20010, 0}, {20010, 39989}, {59999, 1}, {60000, 0}},
      {{100, 8192}, {8292, 8193}, {16485, 1}},
      {{7, 0}},
  };
  int64_t total = 0;
  sets.push_back(gapped_ranges(200, &total));  // more ranges than one launch's table
  ASSERT_LE(total, n);
  for (size_t k = 0; k < sets.size(); ++k) {
    SCOPED_TRACE("set " + std::to_string(k));
    const auto& rg = sets[k];
    const int64_t nr = static_cast<int64_t>(rg.size());
    HostBuf ref(DType::F64, nr);
    parity::run_cpu(kernels::kSumSquares, DType::F32, static_cast<const float*>(g.data()), rg.data(), nr,
                    static_cast<double*>(ref.data()));
    HostBuf out = parity::random_buf(DType::F64, nr, 5);  // poison: every element must be written
    parity::DevBuf dout(out);
    parity::run_cuda(kernels::kSumSquares, DType::F32, static_cast<const float*>(dg.data()), rg.data(), nr,
                     static_cast<double*>(dout.data()));
    const HostBuf got = dout.download();
    // Both sum in double (in other orders): a relative 1e-12 is far above the rounding.
    EXPECT_TRUE(near(got, ref, 1e-12, 0.0));
    const double* r = static_cast<const double*>(ref.data());
    for (int64_t i = 0; i < nr; ++i)
      if (rg[i].n == 0) EXPECT_EQ(static_cast<const double*>(got.data())[i], 0.0) << "empty range " << i << " " << r[i];
    // Deterministic: a second run is bitwise equal.
    parity::run_cuda(kernels::kSumSquares, DType::F32, static_cast<const float*>(dg.data()), rg.data(), nr,
                     static_cast<double*>(dout.data()));
    EXPECT_TRUE(parity::bitwise_equal(dout.download(), got));
  }
#endif
}

// --- gradient clipping ------------------------------------------------------------------------

/// Equal F32 buffers, element by element, where a NaN equals any NaN (a GPU's NaN payload may
/// differ from the host's).
::testing::AssertionResult same_f32(const HostBuf& got, const HostBuf& ref) {
  if (got.n != ref.n) return ::testing::AssertionFailure() << "sizes " << got.n << " vs " << ref.n;
  const float* a = static_cast<const float*>(got.data());
  const float* b = static_cast<const float*>(ref.data());
  for (int64_t i = 0; i < got.n; ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
    if (!both_nan && (a[i] != b[i] || std::signbit(a[i]) != std::signbit(b[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

// grad_norm_from_sums and clip_by_norm on CUDA equal the CPU twins bit for bit: sums with zeros,
// large and tiny values, none (norm 0), an inf and a NaN (coef NaN: scales to NaN); max_norm
// below (scales, the coefficient derived on the device) and above the norm (no change).
TEST(OptimCuda, ClipEntriesEqualCpuBitwise) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  const std::vector<std::vector<double>> sum_sets = {
      {}, {0.0}, {4.0, 9.0, 144.0}, {1e-30, 3.3e7, 0.0, 17.25, 1e-3, 2.5e5}, {1.0, INFINITY}, {2.0, NAN, 1.0}};
  const int64_t n = 5000;
  const HostBuf g = parity::random_buf(DType::F32, n, 91);
  for (size_t k = 0; k < sum_sets.size(); ++k) {
    SCOPED_TRACE("sum set " + std::to_string(k));
    const auto& sv = sum_sets[k];
    const int64_t nr = static_cast<int64_t>(sv.size());
    HostBuf sums(DType::F64, std::max<int64_t>(nr, 1));
    for (int64_t r = 0; r < nr; ++r) static_cast<double*>(sums.data())[r] = sv[static_cast<size_t>(r)];
    HostBuf cnorm(DType::F32, 1);
    parity::run_cpu(kernels::kGradNormFromSums, DType::F32, static_cast<const double*>(sums.data()), nr,
                    static_cast<float*>(cnorm.data()));
    parity::DevBuf dsums(sums), dnorm(parity::random_buf(DType::F32, 1, 3));
    parity::run_cuda(kernels::kGradNormFromSums, DType::F32, static_cast<const double*>(dsums.data()), nr,
                     static_cast<float*>(dnorm.data()));
    const HostBuf gnorm = dnorm.download();
    EXPECT_TRUE(same_f32(gnorm, cnorm)) << "norm " << *static_cast<const float*>(cnorm.data());
    for (float max_norm : {0.5f, 1e30f}) {
      HostBuf cg = g;
      parity::run_cpu(kernels::kClipByNorm, DType::F32, static_cast<float*>(cg.data()), n,
                      static_cast<const float*>(cnorm.data()), max_norm);
      parity::DevBuf dg(g);
      parity::run_cuda(kernels::kClipByNorm, DType::F32, static_cast<float*>(dg.data()), n,
                       static_cast<const float*>(dnorm.data()), max_norm);
      EXPECT_TRUE(same_f32(dg.download(), cg)) << "max_norm " << max_norm;
      const float coef = kernels::clip_coef(*static_cast<const float*>(cnorm.data()), max_norm);
      if (coef >= 1.0f) EXPECT_TRUE(parity::bitwise_equal(cg, g)) << "unchanged at coef " << coef;
      else if (k >= 2) EXPECT_FALSE(parity::bitwise_equal(cg, g)) << "scaled at coef " << coef;
    }
  }
#endif
}

// clip_grad_norm_async over a ParamStore on the device (several parameters, a frozen one, segments
// longer than one sum_squares chunk) queues everything without a device-to-host copy or any wait
// for the device (emulator counters), and the norm and clipped gradients equal the CPU store's bit for bit.
TEST(OptimCuda, ClipGradNormAsyncMatchesCpuWithoutHostReads) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  const std::vector<int64_t> sizes = {7, 20000, 3, 9000, 1};
  auto make = [&](engine::Device d, std::vector<Tensor>* keep) {
    training::NamedTensors named;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Tensor p = Tensor::zeros({sizes[i]}, DType::F32, d);
      if (i != 2) p.set_requires_grad(true);  // parameter 2 is frozen
      keep->push_back(p);
      named.push_back({"p" + std::to_string(i), p});
    }
    auto store = std::make_unique<training::ParamStore>(named);
    engine::autograd::NoGradGuard ng;
    for (size_t i = 0; i < sizes.size(); ++i)
      store->grad_segment(i).copy_(testutil::random_tensor({sizes[i]}, 300 + i, -2, 2, DType::F64).to(DType::F32).to(d));
    return store;
  };
  for (double max_norm : {5.0, 1e6}) {
    SCOPED_TRACE("max_norm " + std::to_string(max_norm));
    std::vector<Tensor> kc, kg;
    auto sc = make(engine::Device::cpu(), &kc);
    auto sg = make(engine::Device::cuda(0), &kg);
    const double want = training::clip_grad_norm_(*sc, max_norm);
#if defined(Y9_CUDA_EMULATOR)
    const uint64_t before = cuda_emu::device_to_host_copies(), syncs = cuda_emu::host_synchronizations();
#endif
    const Tensor norm = training::clip_grad_norm_async(*sg, max_norm);
#if defined(Y9_CUDA_EMULATOR)
    EXPECT_EQ(cuda_emu::device_to_host_copies() - before, 0u) << "clip_grad_norm_async read the device";
    EXPECT_EQ(cuda_emu::host_synchronizations() - syncs, 0u) << "clip_grad_norm_async waited for the device";
#endif
    EXPECT_EQ(norm.device(), engine::Device::cuda(0));
    EXPECT_EQ(norm.numel(), 1);
    EXPECT_EQ(static_cast<double>(norm.item<float>()), want);
    EXPECT_GT(want, 10.0);
    const auto gc = sc->grads().flat.to_vector<float>();
    const auto gg = sg->grads().flat.to(engine::Device::cpu()).to_vector<float>();
    EXPECT_EQ(gg, gc);
    EXPECT_EQ(training::grad_norm(*sg), training::grad_norm(*sc));
  }
#endif
}

// --- BatchNorm --------------------------------------------------------------------------------

/// Per-dtype tolerance of the BatchNorm outputs against the CPU F32 (F64) twin on the same
/// rounded inputs: FP32 accumulation against double, then one rounding to the dtype.
parity::Tol bn_tol(DType dt) {
  switch (dt) {
    case DType::F32: return {2e-5, 2e-5};
    case DType::F64: return {1e-11, 1e-11};
    case DType::F16: return {2.0 / 1024, 1e-4};
    default: return {2.0 / 128, 1e-3};
  }
}

TEST(OptimCuda, BatchNormMatchesCpuTwin) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  // [4,5,17,19]: 1292 values per channel (over 5 blocks' worth of threads); [3,2,45,50]: 6750
  // per channel, two reduction spans per channel; [2,3,1,1] (one value per image).
  const std::vector<std::vector<int64_t>> shapes = {{4, 5, 17, 19}, {3, 2, 45, 50}, {2, 3, 1, 1}};
  uint64_t seed = 300;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (const auto& shape : shapes)
      for (bool training : {true, false})
        for (bool affine : {true, false}) {
          SCOPED_TRACE(std::string(engine::dtype_name(dt)) + " [" + std::to_string(shape[0]) + "," +
                       std::to_string(shape[1]) + "," + std::to_string(shape[2]) + "," + std::to_string(shape[3]) +
                       "] " + (training ? "training" : "eval") + (affine ? " affine" : " no affine"));
          const kernels::BatchNormShape s{shape[0], shape[1], shape[2] * shape[3]};
          const int64_t total = s.n * s.c * s.hw;
          const DType ct = dt == DType::F64 ? DType::F64 : DType::F32;  // the CPU twin's dtype
          // Inputs in dt (an offset mean, so the two-pass variance matters), the CPU's copies
          // converted exactly from them.
          HostBuf x = parity::random_buf(dt, total, seed++, 2.0, 6.0), dy = parity::random_buf(dt, total, seed++);
          HostBuf w = parity::random_buf(dt, s.c, seed++, 0.5, 1.5), b = parity::random_buf(dt, s.c, seed++);
          HostBuf rm = parity::random_buf(dt, s.c, seed++), rv = parity::random_buf(dt, s.c, seed++, 0.5, 2.0);
          HostBuf cx = parity::convert(x, ct), cdy = parity::convert(dy, ct), cw = parity::convert(w, ct),
                  cb = parity::convert(b, ct), crm = parity::convert(rm, ct), crv = parity::convert(rv, ct);
          const double momentum = 0.03, eps = 1e-3;

          // Forward.
          HostBuf cy(ct, total), cmean(ct, s.c), cinv(ct, s.c);
          parity::run_cpu(kernels::kBatchNormForward, ct, ct, s, cx.data(), affine ? cw.data() : nullptr,
                          affine ? cb.data() : nullptr, crm.data(), crv.data(), training, momentum, eps, cy.data(),
                          cmean.data(), cinv.data(), nullptr);
          parity::DevBuf dx_in(x), dw(w), db(b), drm(rm), drv(rv);
          parity::DevBuf dyo(parity::random_buf(dt, total, 1)), dmean(parity::random_buf(dt, s.c, 2)),
              dinv(parity::random_buf(dt, s.c, 3));
          parity::run_cuda(kernels::kBatchNormForward, dt, dt, s, dx_in.data(), affine ? dw.data() : nullptr,
                           affine ? db.data() : nullptr, drm.data(), drv.data(), training, momentum, eps, dyo.data(),
                           dmean.data(), dinv.data(), nullptr);
          const parity::Tol tol = bn_tol(dt);
          EXPECT_TRUE(parity::close(dyo.download(), parity::convert(cy, dt), tol)) << "y";
          EXPECT_TRUE(parity::close(dmean.download(), parity::convert(cmean, dt), tol)) << "mean";
          EXPECT_TRUE(parity::close(dinv.download(), parity::convert(cinv, dt), tol)) << "invstd";
          EXPECT_TRUE(parity::close(drm.download(), parity::convert(crm, dt), tol)) << "running_mean";
          EXPECT_TRUE(parity::close(drv.download(), parity::convert(crv, dt), tol)) << "running_var";

          // Backward from the same saved statistics (the device's, rounded to dt, on both sides).
          const HostBuf mean_t = dmean.download(), inv_t = dinv.download();
          const HostBuf cmean2 = parity::convert(mean_t, ct), cinv2 = parity::convert(inv_t, ct);
          HostBuf cdx(ct, total), cdw(ct, s.c), cdb(ct, s.c);
          parity::run_cpu(kernels::kBatchNormBackward, ct, ct, s, cx.data(), cdy.data(), cmean2.data(), cinv2.data(),
                          affine ? cw.data() : nullptr, training, cdx.data(), cdw.data(), cdb.data(), nullptr);
          parity::DevBuf ddy(dy), dsm(mean_t), dsi(inv_t);
          parity::DevBuf ddx(parity::random_buf(dt, total, 4)), ddw(parity::random_buf(dt, s.c, 5)),
              ddb(parity::random_buf(dt, s.c, 6));
          parity::run_cuda(kernels::kBatchNormBackward, dt, dt, s, dx_in.data(), ddy.data(), dsm.data(), dsi.data(),
                           affine ? dw.data() : nullptr, training, ddx.data(), ddw.data(), ddb.data(), nullptr);
          // dx, dweight and dbias sum M terms of |dy*xhat| ~ 1: allow the FP32 accumulation error
          // of such sums (relative to sqrt(M)-sized values), plus the dtype's rounding.
          const double m = static_cast<double>(s.n * s.hw);
          const parity::Tol sum_tol{tol.eps, tol.atol + (dt == DType::F64 ? 1e-12 : 1e-6) * m};
          EXPECT_TRUE(parity::close(ddx.download(), parity::convert(cdx, dt), tol)) << "dx";
          EXPECT_TRUE(parity::close(ddw.download(), parity::convert(cdw, dt), sum_tol)) << "dweight";
          EXPECT_TRUE(parity::close(ddb.download(), parity::convert(cdb, dt), sum_tol)) << "dbias";
          // Deterministic: the forward again is bitwise equal (fresh running stats).
          if (training) {
            const HostBuf y1 = dyo.download();
            parity::DevBuf drm2(rm), drv2(rv);
            parity::run_cuda(kernels::kBatchNormForward, dt, dt, s, dx_in.data(), affine ? dw.data() : nullptr,
                             affine ? db.data() : nullptr, drm2.data(), drv2.data(), training, momentum, eps,
                             dyo.data(), dmean.data(), dinv.data(), nullptr);
            EXPECT_TRUE(parity::bitwise_equal(dyo.download(), y1));
          }
        }
#endif
}

/// A stand-in all-reduce of BatchNormSync: "the other ranks" add 4*(i+1) plus this rank's own
/// value to sums[i] (v -> 2v + 4(i+1): counts stay integers, and every statistic, the global
/// count and dx change). `state` is the Device whose memory the sums are in.
void double_sums(void* state, double* sums, int64_t n) {
  const engine::Device dev = *static_cast<const engine::Device*>(state);
  std::vector<double> h(static_cast<size_t>(n));
  const size_t nbytes = h.size() * sizeof(double);
  engine::memcpy_between_devices(h.data(), engine::Device::cpu(), sums, dev, nbytes);  // after queued work
  for (size_t i = 0; i < h.size(); ++i) h[i] = 2.0 * h[i] + 4.0 * static_cast<double>(i + 1);
  engine::memcpy_between_devices(sums, dev, h.data(), engine::Device::cpu(), nbytes);
}

TEST(OptimCuda, SyncBatchNormMatchesCpuTwin) {
  Y9_SKIP_WITHOUT_GPU();
#if defined(Y9_WITH_CUDA)
  const kernels::BatchNormShape s{3, 2, 45 * 50};
  const int64_t total = s.n * s.c * s.hw;
  const engine::Device cpu = engine::Device::cpu(), gpu = engine::Device::cuda(0);
  const kernels::BatchNormSync cpu_sync{&double_sums, const_cast<engine::Device*>(&cpu)};
  const kernels::BatchNormSync gpu_sync{&double_sums, const_cast<engine::Device*>(&gpu)};
  for (DType dt : {DType::F32, DType::F16}) {
    SCOPED_TRACE(engine::dtype_name(dt));
    HostBuf x = parity::random_buf(dt, total, 900, -1.0, 3.0), dy = parity::random_buf(dt, total, 901);
    HostBuf w = parity::random_buf(dt, s.c, 902, 0.5, 1.5), b = parity::random_buf(dt, s.c, 903);
    HostBuf rm = parity::random_buf(dt, s.c, 904), rv = parity::random_buf(dt, s.c, 905, 0.5, 2.0);
    HostBuf cx = parity::convert(x, DType::F32), cdy = parity::convert(dy, DType::F32), cw = parity::convert(w, DType::F32),
            cb = parity::convert(b, DType::F32), crm = parity::convert(rm, DType::F32), crv = parity::convert(rv, DType::F32);
    HostBuf cy(DType::F32, total), cmean(DType::F32, s.c), cinv(DType::F32, s.c);
    parity::run_cpu(kernels::kBatchNormForward, DType::F32, DType::F32, s, cx.data(), cw.data(), cb.data(), crm.data(),
                    crv.data(), true, 0.1, 1e-5, cy.data(), cmean.data(), cinv.data(), &cpu_sync);
    parity::DevBuf dx_in(x), dw(w), db(b), drm(rm), drv(rv), dyo(x), dmean(w), dinv(w);
    parity::run_cuda(kernels::kBatchNormForward, dt, dt, s, dx_in.data(), dw.data(), db.data(), drm.data(), drv.data(),
                     true, 0.1, 1e-5, dyo.data(), dmean.data(), dinv.data(), &gpu_sync);
    const parity::Tol tol = bn_tol(dt);
    EXPECT_TRUE(parity::close(dyo.download(), parity::convert(cy, dt), tol)) << "y";
    EXPECT_TRUE(parity::close(dinv.download(), parity::convert(cinv, dt), tol)) << "invstd";
    // The unbiased running variance uses the global count.
    EXPECT_TRUE(parity::close(drv.download(), parity::convert(crv, dt), tol)) << "running_var";
    EXPECT_TRUE(parity::close(drm.download(), parity::convert(crm, dt), tol)) << "running_mean";

    const HostBuf mean_t = dmean.download(), inv_t = dinv.download();
    const HostBuf cmean2 = parity::convert(mean_t, DType::F32), cinv2 = parity::convert(inv_t, DType::F32);
    HostBuf cdx(DType::F32, total), cdw(DType::F32, s.c), cdb(DType::F32, s.c);
    parity::run_cpu(kernels::kBatchNormBackward, DType::F32, DType::F32, s, cx.data(), cdy.data(), cmean2.data(),
                    cinv2.data(), cw.data(), true, cdx.data(), cdw.data(), cdb.data(), &cpu_sync);
    parity::DevBuf ddy(dy), dsm(mean_t), dsi(inv_t), ddx(x), ddw(w), ddb(w);
    parity::run_cuda(kernels::kBatchNormBackward, dt, dt, s, dx_in.data(), ddy.data(), dsm.data(), dsi.data(), dw.data(),
                     true, ddx.data(), ddw.data(), ddb.data(), &gpu_sync);
    const parity::Tol sum_tol{tol.eps, tol.atol + 1e-6 * static_cast<double>(s.n * s.hw)};
    EXPECT_TRUE(parity::close(ddx.download(), parity::convert(cdx, dt), tol)) << "dx";
    EXPECT_TRUE(parity::close(ddw.download(), parity::convert(cdw, dt), sum_tol)) << "dweight (local sums)";
    EXPECT_TRUE(parity::close(ddb.download(), parity::convert(cdb, dt), sum_tol)) << "dbias (local sums)";
  }
#endif
}

}  // namespace
