// batch_norm (BatchNorm2d) and batch_norm_silu (BatchNorm2d then SiLU, fused) on NCHW or blocked
// (ops/ops.h) x: argument checks, dispatch through the backend of x's device
// (kernels/common/batch_norm.h: statistics, running-stat update and normalisation in one entry), and
// the autograd node for x, weight and bias. The running stats are updated in place, outside autograd.
#include "engine/autograd.h"
#include "kernels/common/batch_norm.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace ops {

using engine::DType;
using engine::Tensor;

namespace {

/// `pdt`: the parameters' dtype (x's, or F32 for F16/BF16 x on CUDA under mixed precision).
void check_param(const Tensor& p, const Tensor& x, int64_t c, const char* name, DType pdt) {
  if (!p.defined()) return;
  Y9_CHECK_SHAPE(p.dim() == 1 && p.size(0) == c, "batch_norm: ", name, " ", p.str(), " must be [", c, "] for x ",
                 x.str());
  if (pdt == x.dtype())
    Y9_CHECK_SHAPE(p.dtype() == x.dtype(), "batch_norm: ", name, " ", p.str(), " must have x's dtype ", x.str());
  else
    Y9_CHECK_SHAPE(p.dtype() == pdt, "batch_norm: ", name, " ", p.str(), " must be ", engine::dtype_name(pdt),
                   " like the other parameters of the ", engine::dtype_name(x.dtype()), " x ", x.str());
}

/// F16/BF16 x with F32 parameters (autocast, ops/autocast.h), `p0` the first defined parameter.
bool mixed_dtypes(const Tensor& x, const Tensor& p0) {
  return x.defined() && p0.defined() && p0.dtype() == DType::F32 &&
         (x.dtype() == DType::F16 || x.dtype() == DType::BF16);
}

void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

/// batch_norm, or with `silu` the fused batch_norm_silu (the caller checked that the backend has
/// its entries, that `sync` is null, and that x's and the parameters' dtypes are one of the fused
/// entries' combinations).
Tensor batch_norm_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps,
                       const kernels::BatchNormSync* sync, bool silu) {
  Y9_CHECK_SHAPE(x.defined() && x.dim() >= 2, "batch_norm: x must be [N,C,...] (NCHW), got ",
                 x.defined() ? x.str() : "undefined");
  engine::check_same_device({x, weight, bias, running_mean, running_var}, "batch_norm");
  const bool blocked = is_blocked(x) && x.device().is_cpu();  // a CUDA tensor is never blocked
  if (blocked && training && sync && sync->fn) {
    // Synchronised BatchNorm has no blocked kernel: the plain one, through differentiable
    // conversions (silu is never set here: batch_norm_silu does not fuse with sync).
    return to_blocked(batch_norm(from_blocked(x), weight, bias, running_mean, running_var, training, momentum, eps,
                                 sync),
                      x.size(4));
  }
  const Tensor& p0 = weight.defined() ? weight : running_mean;
  // Mixed precision (autocast, ops/autocast.h): F16/BF16 activations with FP32 parameters and
  // running statistics, as cuDNN's BatchNorm takes them under torch autocast. On CUDA the kernels
  // take the two dtypes (BatchNormShape::f32_params): FP32 statistics and parameter gradients, y
  // and dx in x's dtype. The CPU kernels take one dtype: x is normalised in FP32 through
  // differentiable casts (a blocked x stays blocked: the casts are elementwise).
  const bool f32_params = mixed_dtypes(x, p0);
  if (f32_params && !x.device().is_cuda()) {
    Y9_CHECK_T(engine::InternalError, !silu, "batch_norm_silu: no fused CPU kernel for ", x.str(),
               " with f32 parameters (batch_norm_silu must not fuse it)");
    return batch_norm(x.to(DType::F32), weight, bias, running_mean, running_var, training, momentum, eps, sync)
        .to(x.dtype());
  }
  const DType pdt = f32_params ? DType::F32 : x.dtype();
  // Blocked x [N, C / B, H, W, B]: the kernels' [n, c / B, hw, B] (kernels/common/batch_norm.h).
  const int64_t n = x.size(0), c = blocked ? x.size(1) * x.size(4) : x.size(1);
  const int64_t hw = blocked ? x.size(2) * x.size(3) : n * c > 0 ? x.numel() / (n * c) : 0;
  check_param(weight, x, c, "weight", pdt);
  check_param(bias, x, c, "bias", pdt);
  check_param(running_mean, x, c, "running_mean", pdt);
  check_param(running_var, x, c, "running_var", pdt);
  Y9_CHECK_SHAPE(running_mean.defined() == running_var.defined(),
                 "batch_norm: running_mean and running_var must both be given or both be undefined");
  Y9_CHECK_SHAPE(training || running_mean.defined(), "batch_norm: eval mode needs running_mean and running_var");
  Y9_CHECK_SHAPE(!training || n * hw > 1, "batch_norm: training needs more than one value per channel, got x ",
                 x.str());

  Tensor xc = engine::contiguous_nograd(x);
  Tensor wc = weight.defined() ? engine::contiguous_nograd(weight) : Tensor();
  Tensor bc = bias.defined() ? engine::contiguous_nograd(bias) : Tensor();
  // Running stats are updated in place; strided ones are updated in a contiguous copy and
  // written back.
  Tensor rm, rv;
  if (running_mean.defined()) {
    engine::autograd::NoGradGuard ng;
    rm = running_mean.detach().contiguous();
    rv = running_var.detach().contiguous();
  }
  Tensor mean = Tensor::empty({c}, pdt, x.device());
  Tensor invstd = Tensor::empty({c}, pdt, x.device());
  Tensor y = Tensor::empty(xc.shape(), x.dtype(), x.device());
  const kernels::BatchNormShape shape{n, c, hw, blocked ? x.size(4) : 0, f32_params};
  if (silu) {
    auto k = engine::kernel(kernels::kBatchNormSiluForward, x.dtype(), x.device());
    k.fn(k.ctx, x.dtype(), shape, xc.data_ptr(), ptr_or_null(wc), ptr_or_null(bc), ptr_or_null(rm),
         ptr_or_null(rv), training, momentum, eps, y.data_ptr(), mean.data_ptr(), invstd.data_ptr());
  } else {
    auto k = engine::kernel(kernels::kBatchNormForward, x.dtype(), x.device());
    k.fn(k.ctx, x.dtype(), shape, xc.data_ptr(), ptr_or_null(wc), ptr_or_null(bc), ptr_or_null(rm),
         ptr_or_null(rv), training, momentum, eps, y.data_ptr(), mean.data_ptr(), invstd.data_ptr(),
         training ? sync : nullptr);
  }
  if (training && rm.defined()) {
    engine::autograd::NoGradGuard ng;
    if (rm.data_ptr() != running_mean.data_ptr()) running_mean.detach().copy_(rm);
    if (rv.data_ptr() != running_var.data_ptr()) running_var.detach().copy_(rv);
  }

  if (engine::autograd::needs_grad({x, weight, bias})) {
    const bool need_x = x.requires_grad(), need_w = weight.defined() && weight.requires_grad(),
               need_b = bias.defined() && bias.requires_grad();
    engine::autograd::record_fn(
        silu ? "BatchNormSiluBackward" : "BatchNormBackward", {x, weight, bias}, {y},
        [xc, wc, bc = silu ? bc : Tensor(), mean, invstd, training, need_x, need_w, need_b, shape, sync, silu,
         pdt](const std::vector<Tensor>& g) {
          if (!g[0].defined()) return std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
          const DType dt = xc.dtype();
          Tensor dy = engine::contiguous_nograd(g[0].to(dt));
          Tensor dx = need_x ? Tensor::empty(xc.shape(), dt, xc.device()) : Tensor();
          Tensor dw = need_w ? Tensor::empty({shape.c}, pdt, xc.device()) : Tensor();
          Tensor db = need_b ? Tensor::empty({shape.c}, pdt, xc.device()) : Tensor();
          if (silu) {
            auto kb = engine::kernel(kernels::kBatchNormSiluBackward, dt, xc.device());
            kb.fn(kb.ctx, dt, shape, xc.data_ptr(), dy.data_ptr(), mean.data_ptr(), invstd.data_ptr(),
                  ptr_or_null(wc), ptr_or_null(bc), training, need_x ? dx.data_ptr() : nullptr,
                  need_w ? dw.data_ptr() : nullptr, need_b ? db.data_ptr() : nullptr);
          } else {
            auto kb = engine::kernel(kernels::kBatchNormBackward, dt, xc.device());
            kb.fn(kb.ctx, dt, shape, xc.data_ptr(), dy.data_ptr(), mean.data_ptr(), invstd.data_ptr(),
                  ptr_or_null(wc), training, need_x ? dx.data_ptr() : nullptr, need_w ? dw.data_ptr() : nullptr,
                  need_b ? db.data_ptr() : nullptr, training ? sync : nullptr);
          }
          return std::vector<Tensor>{dx, dw, db};
        });
  }
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps,
                  const kernels::BatchNormSync* sync) {
  return batch_norm_impl(x, weight, bias, running_mean, running_var, training, momentum, eps, sync, false);
}

Tensor batch_norm_silu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps,
                       const kernels::BatchNormSync* sync) {
  // Fused from kBatchNormSiluMinHw elements per (sample, channel) run: below it the per-run calls of
  // the fused entries cost more than the passes they save (ops_bench BM_BatchNormSiluTrain, 16 x 128
  // channels: 4 x 4 maps 0.6-0.7x, 8 x 8 1.04x, 16 x 16 and larger 1.1-1.3x).
  constexpr int64_t kBatchNormSiluMinHw = 64;
  const Tensor& p0 = weight.defined() ? weight : running_mean;
  // Elements per run: h * w of a blocked x (its B lanes are B channels).
  const bool blocked = x.defined() && is_blocked(x) && x.device().is_cpu();
  const int64_t runs = x.defined() && x.dim() >= 2 ? x.size(0) * x.size(1) * (blocked ? x.size(4) : 1) : 0;
  const bool large = runs > 0 && x.numel() / runs >= kBatchNormSiluMinHw;
  // The fused entries' dtypes: F32/F64 x and parameters alike, or F16/BF16 x with F32 parameters
  // on CUDA (autocast); not F16/BF16 parameters (the backward recomputes z from the saved mean
  // and invstd, which they would round).
  const bool wide = x.defined() && (x.dtype() == DType::F32 || x.dtype() == DType::F64);
  const bool dtypes_ok = (wide && (!p0.defined() || p0.dtype() == x.dtype())) ||
                         (mixed_dtypes(x, p0) && x.device().is_cuda());
  const bool fused = large && (!training || !sync) && dtypes_ok &&
                     engine::backend(x.device().type).supports(kernels::kBatchNormSiluForward, x.dtype()) &&
                     engine::backend(x.device().type).supports(kernels::kBatchNormSiluBackward, x.dtype());
  if (!fused) return silu(batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, sync));
  return batch_norm_impl(x, weight, bias, running_mean, running_var, training, momentum, eps, nullptr, true);
}

}  // namespace ops
