// Activations (SiLU, sigmoid, ReLU) and elementwise BCE with logits: validation, CPU dispatch and
// autograd nodes. Kernels in kernels/cpu/activation.cpp; element math in kernels/common.
// Backward nodes are not themselves differentiable (no double backward).
#include "engine/autograd.h"
#include "kernels/cpu/activation.h"
#include "ops/layout.h"
#include "ops/ops.h"

#if defined(Y9_WITH_CUDA)
#include "engine/cuda_runtime.h"
#include "kernels/cuda/elementwise.h"
#endif

namespace ops {

using engine::DType;
using engine::Tensor;

namespace {

void check_float(const Tensor& x, const char* op) {
  Y9_CHECK_SHAPE(x.defined(), op, ": undefined input");
  if (x.device().is_cpu()) {
    Y9_CHECK_SHAPE(x.dtype() == DType::F32 || x.dtype() == DType::F64, op, ": dtype must be f32 or f64 on cpu, got ",
                   x.str());
  } else {
    Y9_CHECK_SHAPE(engine::is_floating(x.dtype()), op, ": dtype must be floating, got ", x.str());
    Y9_CHECK_SHAPE(engine::cuda_compiled(), op, ": CUDA tensor ", x.str(), " but no CUDA backend in this build");
  }
}


enum class Act { Silu, Sigmoid, Relu };

/// y = act(x). CPU: contiguous copy of x through the CPU twin; CUDA: strided launcher.
Tensor act_forward(Act act, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (x.device().is_cpu()) {
    Tensor xc = contiguous_nograd(x);
    const int64_t n = xc.numel();
    if (x.dtype() == DType::F32) {
      const float* in = xc.data<float>();
      float* out = y.data<float>();
      if (act == Act::Silu) kernels::cpu::silu_forward_cpu<float>(in, out, n);
      if (act == Act::Sigmoid) kernels::cpu::sigmoid_forward_cpu<float>(in, out, n);
      if (act == Act::Relu) kernels::cpu::relu_forward_cpu<float>(in, out, n);
    } else {
      const double* in = xc.data<double>();
      double* out = y.data<double>();
      if (act == Act::Silu) kernels::cpu::silu_forward_cpu<double>(in, out, n);
      if (act == Act::Sigmoid) kernels::cpu::sigmoid_forward_cpu<double>(in, out, n);
      if (act == Act::Relu) kernels::cpu::relu_forward_cpu<double>(in, out, n);
    }
    return y;
  }
#if defined(Y9_WITH_CUDA)
  auto ly = layout_for(y, y.shape(), "activation");
  auto lx = layout_for(x, y.shape(), "activation");
  auto stream = kernels::cuda::current_stream(x.device().index);
  if (act == Act::Silu) kernels::cuda::silu_forward_cuda(y.data_ptr(), y.dtype(), ly, x.data_ptr(), lx, stream);
  if (act == Act::Sigmoid) kernels::cuda::sigmoid_forward_cuda(y.data_ptr(), y.dtype(), ly, x.data_ptr(), lx, stream);
  if (act == Act::Relu) kernels::cuda::relu_forward_cuda(y.data_ptr(), y.dtype(), ly, x.data_ptr(), lx, stream);
#endif
  return y;
}

/// dx from `saved` (forward input x for SiLU/ReLU, forward output y for sigmoid) and dy.
Tensor act_backward(Act act, const Tensor& saved, const Tensor& dy_in) {
  Tensor dx = Tensor::empty(saved.shape(), saved.dtype(), saved.device());
  if (dx.numel() == 0) return dx;
  if (saved.device().is_cpu()) {
    Tensor dy = contiguous_nograd(dy_in.to(saved.dtype()));
    const int64_t n = saved.numel();
    if (saved.dtype() == DType::F32) {
      const float* s = saved.data<float>();
      const float* g = dy.data<float>();
      float* o = dx.data<float>();
      if (act == Act::Silu) kernels::cpu::silu_backward_cpu<float>(s, g, o, n);
      if (act == Act::Sigmoid) kernels::cpu::sigmoid_backward_cpu<float>(s, g, o, n);
      if (act == Act::Relu) kernels::cpu::relu_backward_cpu<float>(s, g, o, n);
    } else {
      const double* s = saved.data<double>();
      const double* g = dy.data<double>();
      double* o = dx.data<double>();
      if (act == Act::Silu) kernels::cpu::silu_backward_cpu<double>(s, g, o, n);
      if (act == Act::Sigmoid) kernels::cpu::sigmoid_backward_cpu<double>(s, g, o, n);
      if (act == Act::Relu) kernels::cpu::relu_backward_cpu<double>(s, g, o, n);
    }
    return dx;
  }
#if defined(Y9_WITH_CUDA)
  Tensor dy = dy_in.to(saved.dtype());
  auto l = layout_for(dx, dx.shape(), "activation backward");
  auto ls = layout_for(saved, dx.shape(), "activation backward");
  auto lg = layout_for(dy, dx.shape(), "activation backward");
  auto stream = kernels::cuda::current_stream(saved.device().index);
  if (act == Act::Silu)
    kernels::cuda::silu_backward_cuda(dx.data_ptr(), dx.dtype(), l, saved.data_ptr(), ls, dy.data_ptr(), lg, stream);
  if (act == Act::Sigmoid)
    kernels::cuda::sigmoid_backward_cuda(dx.data_ptr(), dx.dtype(), l, saved.data_ptr(), ls, dy.data_ptr(), lg, stream);
  if (act == Act::Relu)
    kernels::cuda::relu_backward_cuda(dx.data_ptr(), dx.dtype(), l, saved.data_ptr(), ls, dy.data_ptr(), lg, stream);
#endif
  return dx;
}

Tensor activation(Act act, const Tensor& x, const char* op, const char* node) {
  check_float(x, op);
  Tensor y = act_forward(act, x);
  if (engine::autograd::needs_grad({x})) {
    // SiLU/ReLU read the input; sigmoid reads its output, captured detached (no cycle).
    Tensor saved = act == Act::Sigmoid ? y.detach() : (x.device().is_cpu() ? contiguous_nograd(x) : x.detach());
    engine::autograd::record_fn(node, {x}, {y}, [act, saved](const std::vector<Tensor>& g) {
      if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
      return std::vector<Tensor>{act_backward(act, saved, g[0])};
    });
  }
  return y;
}

}  // namespace

// --- activations --------------------------------------------------------------------------------

Tensor silu(const Tensor& x) { return activation(Act::Silu, x, "silu", "SiluBackward"); }
Tensor sigmoid(const Tensor& x) { return activation(Act::Sigmoid, x, "sigmoid", "SigmoidBackward"); }
Tensor relu(const Tensor& x) { return activation(Act::Relu, x, "relu", "ReluBackward"); }

// --- BCE with logits ----------------------------------------------------------------------------

Tensor bce_with_logits(const Tensor& x, const Tensor& target) {
  check_float(x, "bce_with_logits");
  check_float(target, "bce_with_logits");
  Y9_CHECK_SHAPE(x.device().is_cpu() && target.device().is_cpu(),
                 "bce_with_logits: CUDA dispatch not wired yet (kernels/cuda/elementwise.h has the launchers): ",
                 x.str(), ", ", target.str());
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
