// Elementwise arithmetic ops: add/sub/mul/div with NumPy broadcasting, and the scalar unary ops
// (add_scalar, mul_scalar, neg, exp, log, sqrt, pow_scalar, clamp). Validation, dispatch to the
// CPU twins in kernels/cpu/elementwise_ops.cpp, and the autograd nodes. Backward of a broadcast
// operand reduces the full-shape gradient with ops::sum_to.
#include <string>

#include "engine/autograd.h"
#include "kernels/cpu/elementwise_ops.h"
#include "ops/dispatch.h"
#include "ops/layout.h"
#include "ops/ops.h"

#if defined(Y9_WITH_CUDA)
#include "engine/cuda_runtime.h"
#include "kernels/cuda/elementwise.h"
#endif

namespace ops {

using engine::Shape;
using engine::Tensor;
using kernels::UnaryOp;
using kernels::cpu::BinaryOp;

namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
  }
  return "?";
}

void check_binary(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_defined(a, op, "first operand");
  detail::check_defined(b, op, "second operand");
  Y9_CHECK_SHAPE(a.dtype() == b.dtype(), op, ": dtype mismatch between ", a.str(), " and ", b.str());
  Y9_CHECK_SHAPE(a.device() == b.device(), op, ": tensors on different devices: ", a.str(), " and ", b.str());
}

#if defined(Y9_WITH_CUDA)
kernels::cuda::BinaryOp cuda_binary(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return kernels::cuda::BinaryOp::Add;
    case BinaryOp::Sub: return kernels::cuda::BinaryOp::Sub;
    case BinaryOp::Mul: return kernels::cuda::BinaryOp::Mul;
    case BinaryOp::Div: return kernels::cuda::BinaryOp::Div;
  }
  return kernels::cuda::BinaryOp::Add;
}
#endif

// Runs the forward kernel; no autograd.
Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  auto la = layout_for(a, shape, name);
  auto lb = layout_for(b, shape, name);
  auto lo = layout_for(out, shape, name);
  if (a.device().is_cpu()) {
    detail::dispatch_float(a, name, [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::binary_forward_cpu<T>(op, a.data<T>(), la, b.data<T>(), lb, out.data<T>(), lo);
    });
  } else {
#if defined(Y9_WITH_CUDA)
    kernels::cuda::binary_forward_cuda(cuda_binary(op), out.data_ptr(), out.dtype(), lo, a.data_ptr(), la,
                                       b.data_ptr(), lb, kernels::cuda::current_stream(a.device().index));
#else
    Y9_THROW(engine::Error, name, ": CUDA tensor ", a.str(), " but no CUDA backend in this build");
#endif
  }
  return out;
}

Tensor unary_raw(UnaryOp op, const Tensor& x, double p0, double p1, const char* name) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  auto lx = layout_for(x, x.shape(), name);
  auto lo = layout_for(out, x.shape(), name);
  if (x.device().is_cpu()) {
    detail::dispatch_float(x, name, [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::unary_forward_cpu<T>(op, static_cast<T>(p0), static_cast<T>(p1), x.data<T>(), lx,
                                         out.data<T>(), lo);
    });
  } else {
    Y9_THROW(engine::Error, name, ": CUDA not built yet for ", x.str());
  }
  return out;
}

// dx for a unary op; x / y may be undefined when the op does not read them.
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, double p0, double p1,
                      const char* name) {
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  if (dx.numel() == 0) return dx;
  const Shape& s = dy.shape();
  kernels::StridedLayout lx{}, ly{};
  if (x.defined()) lx = layout_for(x, s, name);
  if (y.defined()) ly = layout_for(y, s, name);
  auto ldy = layout_for(dy, s, name);
  auto ldx = layout_for(dx, s, name);
  if (dy.device().is_cpu()) {
    detail::dispatch_float(dy, name, [&](auto tag) {
      using T = decltype(tag);
      kernels::cpu::unary_backward_cpu<T>(op, static_cast<T>(p0), static_cast<T>(p1),
                                          x.defined() ? x.data<T>() : nullptr, lx,
                                          y.defined() ? y.data<T>() : nullptr, ly, dy.data<T>(), ldy,
                                          dx.data<T>(), ldx);
    });
  } else {
    Y9_THROW(engine::Error, name, ": CUDA not built yet for ", dy.str());
  }
  return dx;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  check_binary(a, b, name);
  Tensor out = binary_raw(op, a, b);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const Shape sa = a.shape(), sb = b.shape();
  std::string node = std::string(name) == "add" ? "AddBackward"
                     : std::string(name) == "sub" ? "SubBackward"
                     : std::string(name) == "mul" ? "MulBackward"
                                                  : "DivBackward";
  if (op == BinaryOp::Add || op == BinaryOp::Sub) {
    engine::autograd::record_fn(node.c_str(), {a, b}, {out},
                                [op, need_a, need_b, sa, sb](const std::vector<Tensor>& g) {
                                  std::vector<Tensor> r(2);
                                  if (!g[0].defined()) return r;
                                  if (need_a) r[0] = sum_to(g[0], sa);
                                  if (need_b) {
                                    Tensor gb = sum_to(g[0], sb);
                                    r[1] = op == BinaryOp::Sub ? unary_raw(UnaryOp::Neg, gb, 0, 0, "sub") : gb;
                                  }
                                  return r;
                                });
  } else {
    // Saved: the inputs (not outputs), so no reference cycle.
    engine::autograd::record_fn(
        node.c_str(), {a, b}, {out}, [op, a, b, need_a, need_b, sa, sb, name](const std::vector<Tensor>& g) {
          std::vector<Tensor> r(2);
          if (!g[0].defined()) return r;
          const Tensor& dy = g[0];
          const Shape& s = dy.shape();
          Tensor da = need_a ? Tensor::empty(s, dy.dtype(), dy.device()) : Tensor();
          Tensor db = need_b ? Tensor::empty(s, dy.dtype(), dy.device()) : Tensor();
          if (dy.numel() > 0) {
            auto la = layout_for(a.detach(), s, name);
            auto lb = layout_for(b.detach(), s, name);
            auto ldy = layout_for(dy, s, name);
            kernels::StridedLayout lda = ldy, ldb = ldy;
            if (need_a) lda = layout_for(da, s, name);
            if (need_b) ldb = layout_for(db, s, name);
            if (dy.device().is_cpu()) {
              detail::dispatch_float(dy, name, [&](auto tag) {
                using T = decltype(tag);
                kernels::cpu::binary_backward_cpu<T>(op, a.data<T>(), la, b.data<T>(), lb, dy.data<T>(), ldy,
                                                     need_a ? da.data<T>() : nullptr, lda,
                                                     need_b ? db.data<T>() : nullptr, ldb);
              });
            } else {
              // CUDA: compose the derivatives from the forward kernels (d(a*b) = dy*b, dy*a;
              // d(a/b) = dy/b, -dy*a/b^2). A fused backward kernel can replace this later.
              Tensor ad = a.detach(), bd = b.detach();
              if (op == BinaryOp::Mul) {
                if (need_a) da = binary_raw(BinaryOp::Mul, dy, bd);
                if (need_b) db = binary_raw(BinaryOp::Mul, dy, ad);
              } else {
                Tensor q = binary_raw(BinaryOp::Div, dy, bd);
                if (need_a) da = q;
                if (need_b) {
                  db = binary_raw(BinaryOp::Div, binary_raw(BinaryOp::Mul, q, ad), bd);
                  db.mul_(-1.0);
                }
              }
            }
          }
          if (need_a) r[0] = sum_to(da, sa);
          if (need_b) r[1] = sum_to(db, sb);
          return r;
        });
  }
  return out;
}

// Records the backward of a unary op. `save_x` / `save_y` say which tensors the derivative reads.
Tensor unary(UnaryOp op, const Tensor& x, double p0, double p1, const char* name, const char* node,
             bool save_x, bool save_y) {
  detail::check_defined(x, name, "input");
  Tensor out = unary_raw(op, x, p0, p1, name);
  Tensor xs = save_x ? x : Tensor();
  Tensor ys = save_y ? out.detach() : Tensor();
  engine::autograd::record_fn(node, {x}, {out}, [op, xs, ys, p0, p1, name](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
    if (op == UnaryOp::AddScalar) return std::vector<Tensor>{g[0]};
    return std::vector<Tensor>{unary_backward(op, xs, ys, g[0], p0, p1, name)};
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }

Tensor add_scalar(const Tensor& a, double s) {
  return unary(UnaryOp::AddScalar, a, s, 0, "add_scalar", "AddScalarBackward", false, false);
}
Tensor mul_scalar(const Tensor& a, double s) {
  return unary(UnaryOp::MulScalar, a, s, 0, "mul_scalar", "MulScalarBackward", false, false);
}
Tensor neg(const Tensor& a) { return unary(UnaryOp::Neg, a, 0, 0, "neg", "NegBackward", false, false); }
Tensor exp(const Tensor& a) { return unary(UnaryOp::Exp, a, 0, 0, "exp", "ExpBackward", false, true); }
Tensor log(const Tensor& a) { return unary(UnaryOp::Log, a, 0, 0, "log", "LogBackward", true, false); }
Tensor sqrt(const Tensor& a) { return unary(UnaryOp::Sqrt, a, 0, 0, "sqrt", "SqrtBackward", false, true); }
Tensor pow_scalar(const Tensor& a, double p) {
  return unary(UnaryOp::PowScalar, a, p, 0, "pow_scalar", "PowScalarBackward", true, false);
}
Tensor clamp(const Tensor& x, double lo, double hi) {
  Y9_CHECK_SHAPE(lo <= hi, "clamp: lo ", lo, " > hi ", hi, " for ", x.defined() ? x.str() : "undefined");
  return unary(UnaryOp::Clamp, x, lo, hi, "clamp", "ClampBackward", true, false);
}

}  // namespace ops
