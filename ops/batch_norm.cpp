// batch_norm (BatchNorm2d): argument checks, CPU dispatch, in-place running-stat update (outside
// autograd) and the autograd node for x, weight and bias.
#include "engine/autograd.h"
#include "kernels/cpu/batch_norm.h"
#include "ops/layout.h"
#include "ops/ops.h"

namespace ops {

using engine::DType;
using engine::Tensor;

namespace {


template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

void check_param(const Tensor& p, const Tensor& x, int64_t c, const char* name) {
  if (!p.defined()) return;
  Y9_CHECK_SHAPE(p.dim() == 1 && p.size(0) == c, "batch_norm: ", name, " ", p.str(), " must be [", c, "] for x ",
                 x.str());
  Y9_CHECK_SHAPE(p.dtype() == x.dtype(), "batch_norm: ", name, " ", p.str(), " must have x's dtype ", x.str());
}

/// Updates running stats in place from the batch statistics (never recorded by autograd).
template <typename T>
void update_running(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean,
                    const Tensor& var_biased, int64_t count, double momentum) {
  engine::autograd::NoGradGuard ng;
  Tensor rm = running_mean.detach().contiguous(), rv = running_var.detach().contiguous();
  kernels::cpu::batch_norm_update_running_cpu(mean.data<T>(), var_biased.data<T>(), count, momentum, rm.data<T>(),
                                              rv.data<T>(), mean.numel());
  // Strided running stats were updated in a contiguous copy: write it back.
  if (rm.data_ptr() != running_mean.data_ptr()) running_mean.detach().copy_(rm);
  if (rv.data_ptr() != running_var.data_ptr()) running_var.detach().copy_(rv);
}

template <typename T>
Tensor forward_impl(const Tensor& xc, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps, int64_t n, int64_t c,
                    int64_t hw, Tensor& mean, Tensor& invstd) {
  mean = Tensor::empty({c}, xc.dtype(), xc.device());
  invstd = Tensor::empty({c}, xc.dtype(), xc.device());
  if (training) {
    Tensor var = Tensor::empty({c}, xc.dtype(), xc.device());
    kernels::cpu::batch_norm_stats_cpu(xc.data<T>(), n, c, hw, mean.data<T>(), var.data<T>());
    kernels::cpu::batch_norm_invstd_cpu(var.data<T>(), eps, invstd.data<T>(), c);
    if (running_mean.defined() && running_var.defined())
      update_running<T>(running_mean, running_var, mean, var, n * hw, momentum);
  } else {
    // Copies, so that a later in-place update of the running stats cannot change this backward.
    engine::autograd::NoGradGuard ng;
    mean = running_mean.detach().clone();
    Tensor rv = running_var.detach().contiguous();
    kernels::cpu::batch_norm_invstd_cpu(rv.data<T>(), eps, invstd.data<T>(), c);
  }
  Tensor y = Tensor::empty(xc.shape(), xc.dtype(), xc.device());
  kernels::cpu::batch_norm_forward_cpu(xc.data<T>(), mean.data<T>(), invstd.data<T>(), ptr_or_null<T>(w),
                                       ptr_or_null<T>(b), y.data<T>(), n, c, hw);
  return y;
}

template <typename T>
std::vector<Tensor> backward_impl(const Tensor& xc, const Tensor& dy, const Tensor& mean, const Tensor& invstd,
                                  const Tensor& w, bool training, bool need_x, bool need_w, bool need_b, int64_t n,
                                  int64_t c, int64_t hw) {
  Tensor dx = need_x ? Tensor::empty(xc.shape(), xc.dtype(), xc.device()) : Tensor();
  Tensor dw = need_w ? Tensor::empty({c}, xc.dtype(), xc.device()) : Tensor();
  Tensor db = need_b ? Tensor::empty({c}, xc.dtype(), xc.device()) : Tensor();
  kernels::cpu::batch_norm_backward_cpu(xc.data<T>(), dy.data<T>(), mean.data<T>(), invstd.data<T>(),
                                        ptr_or_null<T>(w), training, need_x ? dx.data<T>() : nullptr,
                                        need_w ? dw.data<T>() : nullptr, need_b ? db.data<T>() : nullptr, n, c, hw);
  return {dx, dw, db};
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  Y9_CHECK_SHAPE(x.defined() && x.dim() >= 2, "batch_norm: x must be [N,C,...] (NCHW), got ",
                 x.defined() ? x.str() : "undefined");
  Y9_CHECK_SHAPE(x.dtype() == DType::F32 || x.dtype() == DType::F64, "batch_norm: dtype must be f32 or f64, got ",
                 x.str());
  check_same_device({x, weight, bias, running_mean, running_var}, "batch_norm");
  Y9_CHECK_SHAPE(x.device().is_cpu(), "batch_norm: CUDA path not built yet for ", x.str());
  const int64_t n = x.size(0), c = x.size(1), hw = n * c > 0 ? x.numel() / (n * c) : 0;
  check_param(weight, x, c, "weight");
  check_param(bias, x, c, "bias");
  check_param(running_mean, x, c, "running_mean");
  check_param(running_var, x, c, "running_var");
  Y9_CHECK_SHAPE(running_mean.defined() == running_var.defined(),
                 "batch_norm: running_mean and running_var must both be given or both be undefined");
  Y9_CHECK_SHAPE(training || running_mean.defined(), "batch_norm: eval mode needs running_mean and running_var");
  Y9_CHECK_SHAPE(!training || n * hw > 1, "batch_norm: training needs more than one value per channel, got x ",
                 x.str());

  Tensor xc = contiguous_nograd(x);
  Tensor wc = weight.defined() ? contiguous_nograd(weight) : Tensor();
  Tensor bc = bias.defined() ? contiguous_nograd(bias) : Tensor();
  Tensor mean, invstd;
  Tensor y = x.dtype() == DType::F32
                 ? forward_impl<float>(xc, wc, bc, running_mean, running_var, training, momentum, eps, n, c, hw,
                                       mean, invstd)
                 : forward_impl<double>(xc, wc, bc, running_mean, running_var, training, momentum, eps, n, c, hw,
                                        mean, invstd);

  if (engine::autograd::needs_grad({x, weight, bias})) {
    const bool need_x = x.requires_grad(), need_w = weight.defined() && weight.requires_grad(),
               need_b = bias.defined() && bias.requires_grad();
    engine::autograd::record_fn(
        "BatchNormBackward", {x, weight, bias}, {y},
        [xc, wc, mean, invstd, training, need_x, need_w, need_b, n, c, hw](const std::vector<Tensor>& g) {
          if (!g[0].defined()) return std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
          Tensor dy = contiguous_nograd(g[0].to(xc.dtype()));
          return xc.dtype() == DType::F32
                     ? backward_impl<float>(xc, dy, mean, invstd, wc, training, need_x, need_w, need_b, n, c, hw)
                     : backward_impl<double>(xc, dy, mean, invstd, wc, training, need_x, need_w, need_b, n, c, hw);
        });
  }
  return y;
}

}  // namespace ops
