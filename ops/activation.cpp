// Activations (SiLU, sigmoid, ReLU) and elementwise BCE with logits: validation, CPU dispatch and
// autograd nodes. Kernels in kernels/cpu/activation.cpp; element math in kernels/common.
// Backward nodes are not themselves differentiable (no double backward).
#include "engine/autograd.h"
#include "kernels/cpu/activation.h"
#include "ops/layout.h"
#include "ops/ops.h"

namespace ops {

using engine::DType;
using engine::Tensor;

namespace {

void check_float_cpu(const Tensor& x, const char* op) {
  Y9_CHECK_SHAPE(x.defined(), op, ": undefined input");
  Y9_CHECK_SHAPE(x.dtype() == DType::F32 || x.dtype() == DType::F64, op, ": dtype must be f32 or f64, got ",
                 x.str());
  Y9_CHECK_SHAPE(x.device().is_cpu(), op, ": CUDA kernel not built yet for ", x.str());
}

Tensor contiguous_nograd(const Tensor& x) {
  engine::autograd::NoGradGuard ng;
  return x.detach().contiguous();
}

/// Runs fwd(x, y, n) on a contiguous copy of x, typed by x's dtype.
template <typename FF, typename FD>
Tensor unary_forward(const Tensor& x, FF f32, FD f64) {
  Tensor xc = contiguous_nograd(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.dtype() == DType::F32)
    f32(xc.data<float>(), y.data<float>(), xc.numel());
  else
    f64(xc.data<double>(), y.data<double>(), xc.numel());
  return y;
}

/// dx = bwd(saved, dy) with `saved` the forward input or output.
template <typename BF, typename BD>
Tensor unary_backward(const Tensor& saved, const Tensor& dy, BF f32, BD f64) {
  Tensor dyc = contiguous_nograd(dy.to(saved.dtype()));
  Tensor dx = Tensor::empty(saved.shape(), saved.dtype(), saved.device());
  if (saved.dtype() == DType::F32)
    f32(saved.data<float>(), dyc.data<float>(), dx.data<float>(), saved.numel());
  else
    f64(saved.data<double>(), dyc.data<double>(), dx.data<double>(), saved.numel());
  return dx;
}

}  // namespace

// --- activations --------------------------------------------------------------------------------

Tensor silu(const Tensor& x) {
  check_float_cpu(x, "silu");
  Tensor y = unary_forward(x, kernels::cpu::silu_forward_cpu<float>, kernels::cpu::silu_forward_cpu<double>);
  if (engine::autograd::needs_grad({x})) {
    Tensor xs = contiguous_nograd(x);
    engine::autograd::record_fn("SiluBackward", {x}, {y}, [xs](const std::vector<Tensor>& g) {
      if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
      return std::vector<Tensor>{unary_backward(xs, g[0], kernels::cpu::silu_backward_cpu<float>,
                                                kernels::cpu::silu_backward_cpu<double>)};
    });
  }
  return y;
}

Tensor sigmoid(const Tensor& x) {
  check_float_cpu(x, "sigmoid");
  Tensor y = unary_forward(x, kernels::cpu::sigmoid_forward_cpu<float>, kernels::cpu::sigmoid_forward_cpu<double>);
  if (engine::autograd::needs_grad({x})) {
    Tensor ys = y.detach();  // forward output: captured detached (no cycle)
    engine::autograd::record_fn("SigmoidBackward", {x}, {y}, [ys](const std::vector<Tensor>& g) {
      if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
      return std::vector<Tensor>{unary_backward(ys, g[0], kernels::cpu::sigmoid_backward_cpu<float>,
                                                kernels::cpu::sigmoid_backward_cpu<double>)};
    });
  }
  return y;
}

Tensor relu(const Tensor& x) {
  check_float_cpu(x, "relu");
  Tensor y = unary_forward(x, kernels::cpu::relu_forward_cpu<float>, kernels::cpu::relu_forward_cpu<double>);
  if (engine::autograd::needs_grad({x})) {
    Tensor xs = contiguous_nograd(x);
    engine::autograd::record_fn("ReluBackward", {x}, {y}, [xs](const std::vector<Tensor>& g) {
      if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
      return std::vector<Tensor>{unary_backward(xs, g[0], kernels::cpu::relu_backward_cpu<float>,
                                                kernels::cpu::relu_backward_cpu<double>)};
    });
  }
  return y;
}

// --- BCE with logits ----------------------------------------------------------------------------

Tensor bce_with_logits(const Tensor& x, const Tensor& target) {
  check_float_cpu(x, "bce_with_logits");
  check_float_cpu(target, "bce_with_logits");
  Y9_CHECK_SHAPE(x.dtype() == target.dtype(), "bce_with_logits: dtypes differ: ", x.str(), " and ", target.str());
  const engine::Shape shape = broadcast_shapes(x.shape(), target.shape(), "bce_with_logits");
  Tensor xc, tc;
  {
    engine::autograd::NoGradGuard ng;
    xc = x.detach().expand(shape).contiguous();
    tc = target.detach().expand(shape).contiguous();
  }
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  const int64_t n = y.numel();
  if (x.dtype() == DType::F32)
    kernels::cpu::bce_with_logits_forward_cpu(xc.data<float>(), tc.data<float>(), y.data<float>(), n);
  else
    kernels::cpu::bce_with_logits_forward_cpu(xc.data<double>(), tc.data<double>(), y.data<double>(), n);
  if (engine::autograd::needs_grad({x, target})) {
    const bool need_x = x.requires_grad(), need_t = target.requires_grad();
    const engine::Shape xshape = x.shape(), tshape = target.shape();
    engine::autograd::record_fn(
        "BceWithLogitsBackward", {x, target}, {y},
        [xc, tc, need_x, need_t, xshape, tshape](const std::vector<Tensor>& g) {
          if (!g[0].defined()) return std::vector<Tensor>{Tensor(), Tensor()};
          Tensor dy = contiguous_nograd(g[0].to(xc.dtype()));
          Tensor dx = need_x ? Tensor::empty(xc.shape(), xc.dtype(), xc.device()) : Tensor();
          Tensor dt = need_t ? Tensor::empty(xc.shape(), xc.dtype(), xc.device()) : Tensor();
          const int64_t n = xc.numel();
          if (xc.dtype() == DType::F32)
            kernels::cpu::bce_with_logits_backward_cpu(xc.data<float>(), tc.data<float>(), dy.data<float>(),
                                                       need_x ? dx.data<float>() : nullptr,
                                                       need_t ? dt.data<float>() : nullptr, n);
          else
            kernels::cpu::bce_with_logits_backward_cpu(xc.data<double>(), tc.data<double>(), dy.data<double>(),
                                                       need_x ? dx.data<double>() : nullptr,
                                                       need_t ? dt.data<double>() : nullptr, n);
          engine::autograd::NoGradGuard ng;
          if (need_x) dx = sum_to(dx, xshape);
          if (need_t) dt = sum_to(dt, tshape);
          return std::vector<Tensor>{dx, dt};
        });
  }
  return y;
}

}  // namespace ops
