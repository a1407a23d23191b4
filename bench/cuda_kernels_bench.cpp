// Google Benchmark: every CUDA kernel family of the training step at yolov9-s shapes (issue 11,
// "Measurement"): BatchNorm forward/backward, max-pool, upsample, concat, softmax (DFL rows), the
// fused SGD/AdamW/EMA steps and the gradient-norm sum over a 7.2M-parameter flat buffer, the TAL
// assigner and the branch loss, and the library entries (cuDNN 3x3 convolution forward/backward,
// cuBLAS GEMM), and the batched NMS against the CPU NMS. Memory-bound kernels report the achieved GB/s over the bytes they must move
// (each input read once, each output written once) and that as a fraction of the H200's 4.8 TB/s
// ("of_H200"); compute-bound ones report TFLOP/s and the fraction of the H200's ~990 TFLOP/s dense
// FP16 (F32/TF32 and F64 are reported against the same number, which they cannot reach). Every
// case also times a device-to-device cudaMemcpy of the same bytes in the same run ("vs_memcpy":
// memcpy time / kernel time, 1.0 = as fast as a copy of the bytes). CUDA-event timing of the
// entry only, L2 flushed before each repeat (guide 3.10). Without a GPU every case reports
// SkipWithError.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/rng.h"
#include "engine/tensor.h"

#if defined(Y9_WITH_CUDA)
#include <cuda_runtime.h>

#include "engine/backend.h"
#include "engine/cuda_runtime.h"
#include "kernels/common/batch_norm.h"
#include "kernels/common/cbfuse.h"
#include "kernels/common/concat.h"
#include "kernels/common/conv.h"
#include "kernels/common/linalg.h"
#include "kernels/common/optim.h"
#include "kernels/common/spatial.h"
#include "kernels/common/tal.h"
#include "kernels/common/yolo_loss.h"
#include "ops/nms.h"
#endif

namespace {

using engine::DType;
using engine::Tensor;

constexpr double kH200Bandwidth = 4.8e12;   // B/s (HBM3e)
constexpr double kH200DenseFp16 = 990e12;   // FLOP/s (dense FP16 tensor cores)

bool skip_without_gpu(benchmark::State& state) {
  if (!engine::cuda_compiled()) {
    state.SkipWithError("built without the CUDA backend");
    return true;
  }
  if (engine::cuda_device_count() == 0) {
    state.SkipWithError("no CUDA device visible");
    return true;
  }
  return false;
}

#if defined(Y9_WITH_CUDA)

const engine::Device kDev = engine::Device::cuda(0);

Tensor rand(const engine::Shape& shape, DType dt, double lo = -1.0, double hi = 1.0, uint64_t seed = 1) {
  Tensor t = Tensor::empty(shape, DType::F32, kDev);
  engine::Generator g(seed, 0);
  engine::uniform_(t, g, lo, hi);
  return dt == DType::F32 ? t : t.to(dt);
}

/// Times `launch` (queued on the compute stream of cuda:0) per iteration with CUDA events after an
/// L2 flush, and a device-to-device copy of `bytes` the same way; sets the counters.
/// `bytes`: the bytes the kernel must move (0: none reported); `flops`: its arithmetic (0: none).
void measure(benchmark::State& state, const std::function<void()>& launch, double bytes, double flops,
             const std::string& label) {
  auto& ctx = engine::backend(engine::DeviceType::CUDA).context(kDev);
  auto s = static_cast<cudaStream_t>(ctx.stream());
  const size_t flush_bytes = size_t(256) << 20;  // > the 50 MB L2 of H100/H200
  Tensor flush = Tensor::empty({static_cast<int64_t>(flush_bytes)}, DType::U8, kDev);
  const size_t copy_bytes = bytes > 0 ? static_cast<size_t>(bytes / 2) : 0;  // read + write = bytes
  Tensor ca, cb;
  if (copy_bytes) {
    ca = Tensor::empty({static_cast<int64_t>(copy_bytes)}, DType::U8, kDev);
    cb = Tensor::empty({static_cast<int64_t>(copy_bytes)}, DType::U8, kDev);
  }
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  auto timed = [&](const std::function<void()>& f) {
    CUDA_CHECK(cudaMemsetAsync(flush.data_ptr(), 0, flush_bytes, s));
    CUDA_CHECK(cudaEventRecord(e0, s));
    f();
    CUDA_CHECK(cudaEventRecord(e1, s));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return static_cast<double>(ms);
  };
  launch();  // warm-up (and the cuDNN algorithm search of a new shape)
  ctx.synchronize();
  double total_ms = 0, copy_ms = 0;
  for (auto _ : state) {
    const double ms = timed(launch);
    total_ms += ms;
    state.SetIterationTime(ms / 1e3);
    if (copy_bytes)
      copy_ms += timed([&] {
        CUDA_CHECK(cudaMemcpyAsync(cb.data_ptr(), ca.data_ptr(), copy_bytes, cudaMemcpyDeviceToDevice, s));
      });
  }
  const double it = static_cast<double>(state.iterations());
  const double sec = total_ms / 1e3 / it;
  if (bytes > 0) {
    state.counters["GB/s"] = bytes / sec / 1e9;
    state.counters["of_H200"] = bytes / sec / kH200Bandwidth;
    state.counters["vs_memcpy"] = copy_ms / total_ms;
  }
  if (flops > 0) {
    state.counters["TFLOP/s"] = flops / sec / 1e12;
    state.counters["of_H200"] = flops / sec / kH200DenseFp16;
  }
  cudaDeviceProp prop{};
  int dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    state.SetLabel(label + " | " + prop.name);
  else
    state.SetLabel(label);
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
}

DType dtype_arg(int64_t v) { return v == 1 ? DType::F16 : v == 2 ? DType::BF16 : DType::F32; }
double esize(DType dt) { return static_cast<double>(engine::dtype_size(dt)); }

// --- BatchNorm: x [16, 64, 160, 160] (the stem's output at batch 16) ---------------------------

void BM_batch_norm(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const DType dt = dtype_arg(state.range(0));
  const bool backward = state.range(1) != 0;
  const kernels::BatchNormShape sh{16, 64, 160 * 160};
  Tensor x = rand({sh.n, sh.c, 160, 160}, dt), dy = rand({sh.n, sh.c, 160, 160}, dt, -1, 1, 2);
  Tensor y = Tensor::empty({sh.n, sh.c, 160, 160}, dt, kDev), dx = Tensor::empty({sh.n, sh.c, 160, 160}, dt, kDev);
  Tensor w = rand({sh.c}, DType::F32, 0.5, 1.5).to(dt), b = rand({sh.c}, dt);
  Tensor rm = Tensor::zeros({sh.c}, dt, kDev), rv = Tensor::ones({sh.c}, dt, kDev);
  Tensor mean = Tensor::empty({sh.c}, dt, kDev), invstd = Tensor::empty({sh.c}, dt, kDev);
  Tensor dw = Tensor::empty({sh.c}, dt, kDev), db = Tensor::empty({sh.c}, dt, kDev);
  auto fwd = engine::kernel(kernels::kBatchNormForward, dt, kDev);
  auto bwd = engine::kernel(kernels::kBatchNormBackward, dt, kDev);
  auto run_fwd = [&] {
    fwd.fn(fwd.ctx, dt, sh, x.data_ptr(), w.data_ptr(), b.data_ptr(), rm.data_ptr(), rv.data_ptr(), true, 0.03, 1e-3,
           y.data_ptr(), mean.data_ptr(), invstd.data_ptr(), nullptr);
  };
  run_fwd();
  const double elems = static_cast<double>(sh.n * sh.c * sh.hw);
  if (!backward) {
    measure(state, run_fwd, 2 * elems * esize(dt), 0, "read x, write y");
  } else {
    measure(state, [&] {
      bwd.fn(bwd.ctx, dt, sh, x.data_ptr(), dy.data_ptr(), mean.data_ptr(), invstd.data_ptr(), w.data_ptr(), true,
             dx.data_ptr(), dw.data_ptr(), db.data_ptr(), nullptr);
    }, 3 * elems * esize(dt), 0, "read x, dy, write dx");
  }
}
BENCHMARK(BM_batch_norm)->ArgsProduct({{0, 1, 2}, {0, 1}})->ArgNames({"f32_f16_bf16", "bwd"})->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// --- spatial: SPPELAN max-pool 5x5 s1 p2 and the neck's nearest x2 upsample ---------------------

void BM_max_pool(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const DType dt = dtype_arg(state.range(0));
  const int64_t n = 16, c = 256, h = 20, w = 20;  // yolov9-s SPPELAN at 640
  Tensor x = rand({n, c, h, w}, dt);
  Tensor y = Tensor::empty({n, c, h, w}, dt, kDev);
  Tensor idx = Tensor::empty({n, c, h, w}, DType::I64, kDev);
  kernels::Plane2d g{n, c, h, w, {c * h * w, h * w, w, 1}, h, w};
  auto k = engine::kernel(kernels::kMaxPool2dForward, dt, kDev);
  const double e = static_cast<double>(n * c * h * w);
  measure(state, [&] { k.fn(k.ctx, dt, x.data_ptr(), g, 5, 1, 2, y.data_ptr(), idx.data<int64_t>()); },
          e * (2 * esize(dt) + 8), 0, "5x5 s1 p2, read x, write y and the argmax");
}
BENCHMARK(BM_max_pool)->Arg(0)->Arg(1)->ArgName("f32_f16")->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_upsample(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const DType dt = dtype_arg(state.range(0));
  const int64_t n = 16, c = 256, h = 40, w = 40;
  Tensor x = rand({n, c, h, w}, dt);
  Tensor y = Tensor::empty({n, c, 2 * h, 2 * w}, dt, kDev);
  kernels::Plane2d g{n, c, h, w, {c * h * w, h * w, w, 1}, 2 * h, 2 * w};
  auto k = engine::kernel(kernels::kUpsampleNearestForward, dt, kDev);
  const double e = static_cast<double>(n * c * h * w);
  measure(state, [&] { k.fn(k.ctx, dt, x.data_ptr(), g, 2, y.data_ptr()); }, 5 * e * esize(dt), 0,
          "nearest x2, read x, write 4x");
}
BENCHMARK(BM_upsample)->Arg(0)->Arg(1)->ArgName("f32_f16")->UseManualTime()->Unit(benchmark::kMicrosecond);

// --- CBFuse: yolov9-c layer 30, the PGI branch's sum of 3 routed pieces and x ------------------------

// x [16, 256, 80, 80] plus channel slices 0:256 of the CBLinear outputs [16, 256, 80, 80] (factor 1),
// [16, 768, 40, 40] (2) and [16, 1280, 20, 20] (4), read in place. Forward: read every piece and x
// once, write out; backward: read dy once per piece (the factor-1 piece's gradient is a copy), write
// every piece's gradient.
void BM_cbfuse(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const DType dt = dtype_arg(state.range(0));
  const bool bwd = state.range(1) != 0;
  const int64_t n = 16, c = 256, h = 80, w = 80;
  const int64_t ctot[3] = {256, 768, 1280}, f[3] = {1, 2, 4};
  Tensor x = rand({n, c, h, w}, dt, -1, 1, 20);
  std::vector<Tensor> bigs, grads;
  std::vector<kernels::CBFusePiece> pieces;
  std::vector<void*> dxs;
  double piece_elems = 0;
  for (int i = 0; i < 3; ++i) {
    const int64_t ph = h / f[i], pw = w / f[i];
    bigs.push_back(rand({n, ctot[i], ph, pw}, dt, -1, 1, 21 + i));
    pieces.push_back({bigs.back().data_ptr(), {ctot[i] * ph * pw, ph * pw, pw, 1}, f[i]});
    grads.push_back(Tensor::empty({n, c, ph, pw}, dt, kDev));
    dxs.push_back(grads.back().data_ptr());
    piece_elems += static_cast<double>(n * c * ph * pw);
  }
  Tensor out = Tensor::empty({n, c, h, w}, dt, kDev);
  const kernels::CBFuseGeom g{n, c, h, w, {c * h * w, h * w, w, 1}};
  const double e = static_cast<double>(n * c * h * w);
  if (bwd) {
    auto k = engine::kernel(kernels::kCBFuseBackward, dt, kDev);
    measure(state, [&] { k.fn(k.ctx, dt, out.data_ptr(), g, f, dxs.data(), 3); }, (3 * e + piece_elems) * esize(dt),
            0, "backward, 3 pieces (factors 1, 2, 4)");
  } else {
    auto k = engine::kernel(kernels::kCBFuseForward, dt, kDev);
    measure(state, [&] { k.fn(k.ctx, dt, pieces.data(), 3, x.data_ptr(), g, out.data_ptr()); },
            (2 * e + piece_elems) * esize(dt), 0, "3 strided pieces (factors 1, 2, 4) + x");
  }
}
BENCHMARK(BM_cbfuse)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"f32_f16", "bwd"})->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// --- concat: the ELAN's 4 x [16, 64, 80, 80] along channels --------------------------------------

void BM_concat(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const DType dt = dtype_arg(state.range(0));
  const int64_t n = 16, c = 64, hw = 80 * 80;
  std::vector<Tensor> parts;
  std::vector<const void*> ptrs;
  std::vector<int64_t> sizes;
  for (int i = 0; i < 4; ++i) {
    parts.push_back(rand({n, c, 80, 80}, dt, -1, 1, 10 + i));
    ptrs.push_back(parts.back().data_ptr());
    sizes.push_back(c);
  }
  Tensor out = Tensor::empty({n, 4 * c, 80, 80}, dt, kDev);
  auto k = engine::kernel(kernels::kConcatForward, dt, kDev);
  const double e = static_cast<double>(4 * n * c * hw);
  measure(state, [&] { k.fn(k.ctx, dt, out.data_ptr(), ptrs.data(), sizes.data(), 4, n, hw); }, 2 * e * esize(dt), 0,
          "4 pieces along C");
}
BENCHMARK(BM_concat)->Arg(0)->Arg(1)->ArgName("f32_f16")->UseManualTime()->Unit(benchmark::kMicrosecond);

// --- softmax: the DFL's rows of 16 bins, 16 images x 8400 anchors x 4 sides ----------------------

void BM_softmax_dfl(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const DType dt = dtype_arg(state.range(0));
  const int64_t outer = 16 * 8400 * 4, n = 16;
  Tensor x = rand({outer, n}, dt, -3, 3);
  Tensor y = Tensor::empty({outer, n}, dt, kDev);
  auto k = engine::kernel(kernels::kSoftmaxForward, dt, kDev);
  measure(state, [&] { k.fn(k.ctx, dt, x.data_ptr(), y.data_ptr(), outer, n, 1, false); },
          2 * static_cast<double>(outer * n) * esize(dt), 0, "rows of 16");
}
BENCHMARK(BM_softmax_dfl)->Arg(0)->Arg(1)->ArgName("f32_f16")->UseManualTime()->Unit(benchmark::kMicrosecond);

// --- fused optimizer, EMA and the gradient norm over yolov9-s's 7.2M parameters (F32 flat) -------

constexpr int64_t kParams = 7'200'000;
std::vector<kernels::FlatRange> three_groups() {  // the official 3 parameter groups, as ranges
  return {{0, 60'000}, {60'000, 7'080'000}, {7'140'000, 60'000}};
}

void BM_optimizer(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const int which = static_cast<int>(state.range(0));  // 0 SGD, 1 AdamW, 2 EMA, 3 sum_squares
  Tensor p = rand({kParams}, DType::F32), g = rand({kParams}, DType::F32, -1, 1, 2);
  Tensor m = rand({kParams}, DType::F32, -1, 1, 3), v = rand({kParams}, DType::F32, 0, 1, 4);
  Tensor sums = Tensor::empty({3}, DType::F64, kDev);
  const auto rg = three_groups();
  const double f = 4;
  switch (which) {
    case 0: {
      auto k = engine::kernel(kernels::kSgdStep, DType::F32, kDev);
      kernels::SgdScalars s{0.01f, 0.937f, 1.f, 5e-4f, true, false};
      measure(state, [&] { k.fn(k.ctx, p.data<float>(), g.data<float>(), m.data<float>(), rg.data(), 3, s); },
              5 * f * kParams, 0, "SGD nesterov: read p, g, buf; write p, buf");
      break;
    }
    case 1: {
      auto k = engine::kernel(kernels::kAdamStep, DType::F32, kDev);
      kernels::AdamScalars s;
      s.decoupled = true;
      s.decay_factor = 0.9999f;
      s.step_size = 1e-3f;
      s.bias_correction2_sqrt = 0.5f;
      measure(state, [&] {
        k.fn(k.ctx, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), nullptr, rg.data(), 3, s);
      }, 7 * f * kParams, 0, "AdamW: read p, g, m, v; write p, m, v");
      break;
    }
    case 2: {
      auto k = engine::kernel(kernels::kEmaUpdate, DType::F32, kDev);
      measure(state, [&] { k.fn(k.ctx, m.data<float>(), p.data<float>(), kParams, 0.999f, 0.001f); },
              3 * f * kParams, 0, "EMA: read ema, model; write ema");
      break;
    }
    default: {
      auto k = engine::kernel(kernels::kSumSquares, DType::F32, kDev);
      measure(state, [&] { k.fn(k.ctx, g.data<float>(), rg.data(), 3, sums.data<double>()); }, f * kParams, 0,
              "gradient norm: read g");
      break;
    }
  }
}
BENCHMARK(BM_optimizer)->DenseRange(0, 3)->ArgName("sgd_adamw_ema_sumsq")->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// --- loss: TAL assigner and the branch loss, batch 16, 8400 anchors, 30 gts, 80 classes ---------

void BM_loss(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const bool assigner = state.range(0) == 0;
  const int64_t B = 16, A = 8400, M = 30, nc = 80;
  const int reg = 16;
  Tensor ps = rand({B, A, nc}, DType::F32, 0.01, 0.99);
  Tensor pb = rand({B, A, 4}, DType::F32, 0, 640);
  Tensor anc = rand({A, 2}, DType::F32, 0, 640);
  Tensor gl = rand({B, M}, DType::F32, 0, 79);
  Tensor gxy = rand({B, M, 2}, DType::F32, 0, 500), gwh = rand({B, M, 2}, DType::F32, 20, 140);
  Tensor gb = Tensor::empty({B, M, 4}, DType::F32, kDev);
  gb.narrow(2, 0, 2).copy_(gxy);
  gb.narrow(2, 2, 2).copy_(gxy);
  gb.narrow(2, 2, 2).add_(gwh);
  Tensor mg = Tensor::ones({B, M}, DType::F32, kDev);
  Tensor tl = Tensor::empty({B, A}, DType::I64, kDev), tb = Tensor::empty({B, A, 4}, DType::F32, kDev);
  Tensor ts = Tensor::empty({B, A, nc}, DType::F32, kDev), fg = Tensor::empty({B, A}, DType::Bool, kDev);
  Tensor gi = Tensor::empty({B, A}, DType::I64, kDev);
  kernels::TalConfig cfg;
  cfg.num_classes = nc;
  auto tal = engine::kernel(kernels::kTalAssign, DType::F32, kDev);
  auto run_tal = [&] {
    tal.fn(tal.ctx, DType::F32, ps.data_ptr(), pb.data_ptr(), anc.data_ptr(), gl.data_ptr(), gb.data_ptr(),
           mg.data_ptr(), B, A, M, cfg, tl.data<int64_t>(), tb.data_ptr(), ts.data_ptr(), fg.data<bool>(),
           gi.data<int64_t>());
  };
  if (assigner) {
    measure(state, run_tal, 0, 0, "TAL assigner, 16 x 8400 anchors x 30 gts, 80 classes");
    return;
  }
  run_tal();
  Tensor pred = rand({B, A, 4 * reg + nc}, DType::F32, -2, 2);
  Tensor grid = rand({B, A, 4}, DType::F32, 0, 80);
  Tensor stride = Tensor::full({A}, 8.0, DType::F32, kDev);
  Tensor sums = Tensor::empty({4}, DType::F64, kDev);
  auto fwd = engine::kernel(kernels::kYoloBranchLossForward, DType::F32, kDev);
  measure(state, [&] {
    fwd.fn(fwd.ctx, DType::F32, pred.data_ptr(), grid.data_ptr(), anc.data_ptr(), stride.data_ptr(), tb.data_ptr(),
           ts.data_ptr(), fg.data<bool>(), B, A, nc, reg, sums.data<double>());
  }, static_cast<double>(B * A * (4 * reg + 2 * nc + 8)) * 4, 0, "branch loss forward (cls + CIoU + DFL sums)");
}
BENCHMARK(BM_loss)->Arg(0)->Arg(1)->ArgName("tal_branchloss")->UseManualTime()->Unit(benchmark::kMicrosecond);

// --- library entries: cuDNN 3x3 conv [16, 64, 160, 160] -> 64 and a cuBLAS 4096^3 GEMM -------------

void BM_conv3x3(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const DType dt = dtype_arg(state.range(0));
  const int dir = static_cast<int>(state.range(1));  // 0 forward, 1 backward data, 2 backward weights
  kernels::Conv2dShape s{16, 64, 160, 160, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 160, 160};
  Tensor x = rand({16, 64, 160, 160}, dt), w = rand({64, 64, 3, 3}, dt, -0.1, 0.1);
  Tensor y = Tensor::empty({16, 64, 160, 160}, dt, kDev), dw = Tensor::empty({64, 64, 3, 3}, dt, kDev);
  const double flops = 2.0 * 16 * 64 * 160 * 160 * 64 * 9;
  if (dir == 0) {
    auto k = engine::kernel(kernels::kConv2dForward, dt, kDev);
    measure(state, [&] { k.fn(k.ctx, s, dt, x.data_ptr(), w.data_ptr(), nullptr, y.data_ptr(), nullptr); }, 0, flops,
            "cuDNN forward");
  } else if (dir == 1) {
    auto k = engine::kernel(kernels::kConv2dBackwardData, dt, kDev);
    measure(state, [&] { k.fn(k.ctx, s, dt, x.data_ptr(), w.data_ptr(), y.data_ptr(), nullptr); }, 0, flops,
            "cuDNN backward data");
  } else {
    auto k = engine::kernel(kernels::kConv2dBackwardWeights, dt, kDev);
    measure(state, [&] { k.fn(k.ctx, s, dt, x.data_ptr(), y.data_ptr(), dw.data_ptr(), nullptr); }, 0, flops,
            "cuDNN backward weights");
  }
}
BENCHMARK(BM_conv3x3)->ArgsProduct({{0, 1, 2}, {0, 1, 2}})->ArgNames({"f32_f16_bf16", "fwd_bwdd_bwdw"})
    ->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_gemm(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const DType dt = dtype_arg(state.range(0));
  const int64_t n = 4096;
  Tensor a = rand({n, n}, dt), b = rand({n, n}, dt), c = Tensor::empty({n, n}, dt, kDev);
  kernels::GemmOperand ga, gb;
  ga.ptr = a.data_ptr();
  ga.ld = n;
  ga.batch.ndim = 1;
  ga.batch.sizes[0] = 1;
  gb = ga;
  gb.ptr = b.data_ptr();
  auto k = engine::kernel(kernels::kMatmulForward, dt, kDev);
  measure(state, [&] { k.fn(k.ctx, dt, ga, gb, c.data_ptr(), n, n, n); }, 0, 2.0 * n * n * n, "cuBLAS 4096^3");
}
BENCHMARK(BM_gemm)->Arg(0)->Arg(1)->Arg(2)->ArgName("f32_f16_bf16")->UseManualTime()->Unit(benchmark::kMicrosecond);

// --- NMS: the official non_max_suppression on 30000 anchors x 80 classes (val settings) ----------

// The prediction of bench/nms_bench.cpp ([1, 84, 30000], boxes around 64 hot spots of a 640 px
// image, scores uniform: every anchor is a candidate at conf 0.001), on cuda:0 and on the CPU. Best
// class: 30000 candidates into the sort and the 30000 x 30000 IoU mask; multi-label: 2.4M
// (anchor, class) pairs sorted, the top max_nms = 30000 into the mask. Wall-clock time of
// ops::non_max_suppression (launch sequence, its one mid-sequence synchronisation, the kept
// counts read back, the kept rows cut out) against the CPU NMS on the same values (cpu_ms,
// speedup = cpu / cuda); kept = the rows kept (equal on both devices, else an error).
void BM_nms(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const int64_t boxes = 30000, nc = 80;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> hot(128);
  for (auto& h : hot) h = 40.f + 560.f * u(rng);
  std::vector<float> v(static_cast<size_t>((4 + nc) * boxes));
  for (int64_t a = 0; a < boxes; ++a) {
    const int64_t h = a % 64;
    v[0 * boxes + a] = hot[2 * h] + 20.f * (u(rng) - 0.5f);
    v[1 * boxes + a] = hot[2 * h + 1] + 20.f * (u(rng) - 0.5f);
    v[2 * boxes + a] = 20.f + 100.f * u(rng);
    v[3 * boxes + a] = 20.f + 100.f * u(rng);
    for (int64_t c = 0; c < nc; ++c) v[(4 + c) * boxes + a] = u(rng);
  }
  const Tensor cpu_pred = Tensor::from_vector<float>(v, {1, 4 + nc, boxes});
  const Tensor pred = cpu_pred.to(kDev);
  ops::NmsOptions opt;
  opt.conf_thres = 0.001;
  opt.iou_thres = 0.7;
  opt.multi_label = state.range(0) != 0;
  auto& ctx = engine::backend(engine::DeviceType::CUDA).context(kDev);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  const int cpu_iters = 3;
  int64_t cpu_kept = 0;
  for (int i = 0; i < cpu_iters; ++i) cpu_kept = ops::non_max_suppression(cpu_pred, opt)[0].size(0);
  const double cpu_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count() / cpu_iters;
  int64_t kept = ops::non_max_suppression(pred, opt)[0].size(0);  // warm-up (allocator)
  ctx.synchronize();
  double total_ms = 0;
  for (auto _ : state) {
    t0 = clock::now();
    kept = ops::non_max_suppression(pred, opt)[0].size(0);
    ctx.synchronize();
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    total_ms += ms;
    state.SetIterationTime(ms / 1e3);
  }
  if (kept != cpu_kept) state.SkipWithError("cuda and cpu kept different row counts");
  state.counters["kept"] = static_cast<double>(kept);
  state.counters["cpu_ms"] = cpu_ms;
  state.counters["speedup"] = cpu_ms / (total_ms / static_cast<double>(state.iterations()));
  state.SetLabel(opt.multi_label ? "multi_label (2.4M pairs -> max_nms 30000)" : "best class (30000 candidates)");
}
BENCHMARK(BM_nms)->Arg(0)->Arg(1)->ArgName("multi_label")->UseManualTime()->Unit(benchmark::kMillisecond);

#else  // no CUDA backend: one case that says so

void BM_cuda_kernels(benchmark::State& state) { skip_without_gpu(state); }
BENCHMARK(BM_cuda_kernels);

#endif

}  // namespace

BENCHMARK_MAIN();
