// Kernel entries of BatchNorm2d over contiguous NCHW buffers (x viewed as [n, c, hw]) or, on the
// CPU, the blocked channel layout (ops/ops.h: x viewed as [n, c / B, hw, B]).
// Source: Ioffe & Szegedy, "Batch Normalization" (ICML 2015); PyTorch BatchNorm conventions
// (biased batch variance to normalise, unbiased n/(n-1) variance into running_var).
#pragma once
#include <cstdint>

#include "engine/backend.h"

namespace kernels {

/// The layout of x, y, dy and dx (contiguous, dtype of the entry); weight, bias, the running stats,
/// mean and invstd are always [c], of the entry's dtype unless f32_params.
/// block == 0: plain NCHW viewed as [n, c, hw].
/// block == B (8 or 16; CPU only, F32/F64): the blocked channel layout (oneDNN nChw8c / nChw16c)
/// viewed as [n, c / B, hw, B], channel ch = cb * B + lane; c must be a multiple of B. Same math as
/// the plain layout (not the same bits: the sums add in another order), deterministic for any
/// thread count; no `sync` (the CPU entries throw ShapeError). The CUDA entries throw ShapeError
/// for block != 0.
/// f32_params (CUDA only, autocast): x, y, dy and dx are the entry's dtype F16 or BF16 while weight,
/// bias, the running stats, mean, invstd, dweight and dbias are F32 (cuDNN's BatchNorm under torch
/// autocast); the statistics are FP32 either way. The CPU entries throw ShapeError.
struct BatchNormShape {
  int64_t n, c, hw;
  int64_t block = 0;
  bool f32_params = false;
};

/// Synchronised BatchNorm (data-parallel `--sync-bn`; official torch.nn.SyncBatchNorm): the
/// statistics of the whole global batch. `fn(state, sums, n)` must replace the `n` doubles at
/// `sums` (memory of the context's device) by their sum over all ranks, in place (an
/// all-reduce); every rank calls it the same number of times in the same order. The entries
/// call it between their passes: forward twice (per-channel sums and the element count, then
/// per-channel sums of squared deviations: the two-pass variance of the global batch), backward
/// once (sum dy, sum dy*xhat and the count). dweight/dbias stay this rank's own sums (the
/// gradient reducer sums them). A null `sync` (or fn) = this batch only.
struct BatchNormSync {
  void (*fn)(void* state, double* sums, int64_t n) = nullptr;
  void* state = nullptr;
};

/// training: mean[c], invstd[c] = 1/sqrt(var_biased + eps) from this batch; when running_mean
/// and running_var are non-null, updates them in place: r = (1-momentum)*r + momentum*stat with
/// the unbiased variance (count n*hw; factor 1 when count == 1).
/// eval: mean = running_mean (copied), invstd from running_var.
/// y = (x - mean) * invstd * weight + bias (weight/bias may be null: 1 and 0).
/// CPU: statistics accumulated in double (two-pass), fixed order per channel: deterministic.
/// `sync` (training only): statistics over every rank's batch (count = the global n*hw).
using BatchNormForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const BatchNormShape& s,
                                    const void* x, const void* weight, const void* bias, void* running_mean,
                                    void* running_var, bool training, double momentum, double eps, void* y,
                                    void* mean, void* invstd, const BatchNormSync* sync);
inline engine::KernelKey<BatchNormForwardFn> kBatchNormForward{"batch_norm_forward"};

/// Backward with xhat = (x - mean) * invstd and M = n*hw: dweight = sum dy*xhat, dbias = sum dy
/// (each when non-null), and when dx is non-null:
///  training: dx = w*invstd/M * (M*dy - sum dy - xhat*sum dy*xhat);   eval: dx = w*invstd*dy.
/// `sync` (training only): the sums and M in dx are over every rank (dweight, dbias stay local).
using BatchNormBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const BatchNormShape& s,
                                     const void* x, const void* dy, const void* mean, const void* invstd,
                                     const void* weight, bool training, void* dx, void* dweight, void* dbias,
                                     const BatchNormSync* sync);
inline engine::KernelKey<BatchNormBackwardFn> kBatchNormBackward{"batch_norm_backward"};

/// y = silu(z), z = BatchNorm2d(x) as kBatchNormForward computes it (same statistics, running-stat
/// update and z), without storing z: the training form of a Conv block's BN + SiLU (official
/// models/common.py Conv.forward: act(bn(conv(x)))). CPU and CUDA (F32/F64; CUDA also F16/BF16 x
/// with f32_params, not F16/BF16 parameters) round z and y exactly as their two entries
/// batch_norm_forward and unary SiLU do. No `sync`: synchronised BatchNorm uses the two.
using BatchNormSiluForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const BatchNormShape& s,
                                        const void* x, const void* weight, const void* bias, void* running_mean,
                                        void* running_var, bool training, double momentum, double eps, void* y,
                                        void* mean, void* invstd);
inline engine::KernelKey<BatchNormSiluForwardFn> kBatchNormSiluForward{"batch_norm_silu_forward"};

/// Backward of kBatchNormSiluForward from x (z recomputed from x, mean, invstd, weight and bias):
/// dz = SiLU'(z) * dy, then dx, dweight, dbias as kBatchNormBackward computes them from dz. CPU
/// and CUDA give the bits of their two backward entries (unary SiLU, then batch_norm_backward).
using BatchNormSiluBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const BatchNormShape& s,
                                         const void* x, const void* dy, const void* mean, const void* invstd,
                                         const void* weight, const void* bias, bool training, void* dx,
                                         void* dweight, void* dbias);
inline engine::KernelKey<BatchNormSiluBackwardFn> kBatchNormSiluBackward{"batch_norm_silu_backward"};

}  // namespace kernels
