// Pointwise ops: add/sub/mul/div with NumPy broadcasting, every UnaryOp (scalar arithmetic, exp,
// log, sqrt, pow, clamp and the activations SiLU, sigmoid, ReLU), and BCE with logits.
// Validation, dispatch through the backend of the input's device (entries in
// kernels/common/elementwise.h) and the autograd nodes. Backward of a broadcast operand reduces
// the full-shape gradient with engine::sum_to. Backward nodes are not differentiable.
#include <string>

#include "engine/autograd.h"
#include "kernels/common/elementwise.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace ops {

using engine::Shape;
using engine::Tensor;
using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {

// Runs the forward kernel; no autograd.
Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = kernels::binary_op_name(op);
  Shape shape = engine::broadcast_shapes(a.shape(), b.shape(), name);
  auto k = engine::kernel(kernels::kBinaryForward, a.dtype(), a.device());
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  auto la = engine::layout_for(a, shape, name);
  auto lb = engine::layout_for(b, shape, name);
  auto lo = engine::layout_for(out, shape, name);
  k.fn(k.ctx, op, a.dtype(), out.data_ptr(), lo, a.data_ptr(), la, b.data_ptr(), lb);
  return out;
}

Tensor unary_raw(UnaryOp op, const Tensor& x, double p0, double p1, const char* name) {
  auto k = engine::kernel(kernels::kUnaryForward, x.dtype(), x.device());
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  auto lx = engine::layout_for(x, x.shape(), name);
  auto lo = engine::layout_for(out, x.shape(), name);
  k.fn(k.ctx, op, x.dtype(), p0, p1, out.data_ptr(), lo, x.data_ptr(), lx);
  return out;
}

// dx for a unary op; x / y may be undefined when the op does not read them.
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy_in, double p0, double p1,
                      const char* name) {
  const engine::DType dt = x.defined() ? x.dtype() : y.defined() ? y.dtype() : dy_in.dtype();
  Tensor dy = dy_in.to(dt);
  auto k = engine::kernel(kernels::kUnaryBackward, dt, dy.device());
  Tensor dx = Tensor::empty(dy.shape(), dt, dy.device());
  if (dx.numel() == 0) return dx;
  const Shape& s = dy.shape();
  engine::StridedLayout lx{}, ly{};
  if (x.defined()) lx = engine::layout_for(x, s, name);
  if (y.defined()) ly = engine::layout_for(y, s, name);
  auto ldy = engine::layout_for(dy, s, name);
  auto ldx = engine::layout_for(dx, s, name);
  k.fn(k.ctx, op, dt, p0, p1, dx.data_ptr(), ldx, x.defined() ? x.data_ptr() : nullptr, lx,
       y.defined() ? y.data_ptr() : nullptr, ly, dy.data_ptr(), ldy);
  return dx;
}

Tensor binary(BinaryOp op, const char* node, const Tensor& a, const Tensor& b) {
  const char* name = kernels::binary_op_name(op);
  detail::check_defined(a, name, "first operand");
  detail::check_defined(b, name, "second operand");
  if (detail::promotes_mixed(a.dtype(), b.dtype())) {
    // Mixed floating dtypes (autocast F16/BF16 activations meeting FP32 tensors): both promoted
    // (detail::promote_floating) through differentiable casts.
    const engine::DType w = detail::promote_floating(a.dtype(), b.dtype());
    return binary(op, node, a.to(w), b.to(w));
  }
  Y9_CHECK_SHAPE(a.dtype() == b.dtype(), name, ": dtype mismatch between ", a.str(), " and ", b.str());
  Y9_CHECK_SHAPE(a.device() == b.device(), name, ": tensors on different devices: ", a.str(), " and ", b.str());
  Tensor out = binary_raw(op, a, b);
  if (!engine::autograd::needs_grad({a, b})) return out;
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const Shape sa = a.shape(), sb = b.shape();
  if (op == BinaryOp::Add || op == BinaryOp::Sub) {
    engine::autograd::record_fn(node, {a, b}, {out}, [op, need_a, need_b, sa, sb](const std::vector<Tensor>& g) {
      std::vector<Tensor> r(2);
      if (!g[0].defined()) return r;
      if (need_a) r[0] = engine::sum_to(g[0], sa);
      if (need_b) {
        Tensor gb = engine::sum_to(g[0], sb);
        r[1] = op == BinaryOp::Sub ? unary_raw(UnaryOp::Neg, gb, 0, 0, "sub") : gb;
      }
      return r;
    });
    return out;
  }
  // Saved: the inputs (not the output), so no reference cycle.
  const Tensor ad = a.detach(), bd = b.detach();
  engine::autograd::record_fn(node, {a, b}, {out}, [op, ad, bd, need_a, need_b, sa, sb, name](const std::vector<Tensor>& g) {
    std::vector<Tensor> r(2);
    if (!g[0].defined()) return r;
    const Tensor dy = g[0].to(ad.dtype());
    const Shape& s = dy.shape();
    Tensor da = need_a ? Tensor::empty(s, dy.dtype(), dy.device()) : Tensor();
    Tensor db = need_b ? Tensor::empty(s, dy.dtype(), dy.device()) : Tensor();
    if (dy.numel() > 0) {
      auto k = engine::kernel(kernels::kBinaryBackward, dy.dtype(), dy.device());
      auto la = engine::layout_for(ad, s, name);
      auto lb = engine::layout_for(bd, s, name);
      auto ldy = engine::layout_for(dy, s, name);
      engine::StridedLayout lda = ldy, ldb = ldy;
      if (need_a) lda = engine::layout_for(da, s, name);
      if (need_b) ldb = engine::layout_for(db, s, name);
      k.fn(k.ctx, op, dy.dtype(), ad.data_ptr(), la, bd.data_ptr(), lb, dy.data_ptr(), ldy,
           need_a ? da.data_ptr() : nullptr, lda, need_b ? db.data_ptr() : nullptr, ldb);
    }
    if (need_a) r[0] = engine::sum_to(da, sa);
    if (need_b) r[1] = engine::sum_to(db, sb);
    return r;
  });
  return out;
}

// A unary op and its backward node; what the backward reads comes from kernels::unary_saves.
Tensor unary(UnaryOp op, const Tensor& x, double p0, double p1, const char* name, const char* node) {
  detail::check_defined(x, name, "input");
  Tensor out = unary_raw(op, x, p0, p1, name);
  if (!engine::autograd::needs_grad({x})) return out;
  const kernels::UnarySaves saves = kernels::unary_saves(op);
  // The forward input is saved detached (and contiguous on the CPU, where reads are cheapest
  // dense); the output is saved detached, so no reference cycle.
  Tensor xs = saves.x ? (x.device().is_cpu() ? engine::contiguous_nograd(x) : x.detach()) : Tensor();
  Tensor ys = saves.y ? out.detach() : Tensor();
  engine::autograd::record_fn(node, {x}, {out}, [op, xs, ys, p0, p1, name](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
    if (op == UnaryOp::AddScalar) return std::vector<Tensor>{g[0]};
    return std::vector<Tensor>{unary_backward(op, xs, ys, g[0], p0, p1, name)};
  });
  return out;
}

}  // namespace

// --- binary -------------------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, "AddBackward", a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, "SubBackward", a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, "MulBackward", a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, "DivBackward", a, b); }

// --- unary --------------------------------------------------------------------------------------------

Tensor add_scalar(const Tensor& a, double s) { return unary(UnaryOp::AddScalar, a, s, 0, "add_scalar", "AddScalarBackward"); }
Tensor mul_scalar(const Tensor& a, double s) { return unary(UnaryOp::MulScalar, a, s, 0, "mul_scalar", "MulScalarBackward"); }
Tensor neg(const Tensor& a) { return unary(UnaryOp::Neg, a, 0, 0, "neg", "NegBackward"); }
Tensor exp(const Tensor& a) { return unary(UnaryOp::Exp, a, 0, 0, "exp", "ExpBackward"); }
Tensor log(const Tensor& a) { return unary(UnaryOp::Log, a, 0, 0, "log", "LogBackward"); }
Tensor sqrt(const Tensor& a) { return unary(UnaryOp::Sqrt, a, 0, 0, "sqrt", "SqrtBackward"); }
Tensor pow_scalar(const Tensor& a, double p) { return unary(UnaryOp::PowScalar, a, p, 0, "pow_scalar", "PowScalarBackward"); }
Tensor clamp(const Tensor& x, double lo, double hi) {
  Y9_CHECK_SHAPE(lo <= hi, "clamp: lo ", lo, " > hi ", hi, " for ", x.defined() ? x.str() : "undefined");
  return unary(UnaryOp::Clamp, x, lo, hi, "clamp", "ClampBackward");
}
Tensor silu(const Tensor& x) { return unary(UnaryOp::Silu, x, 0, 0, "silu", "SiluBackward"); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::Sigmoid, x, 0, 0, "sigmoid", "SigmoidBackward"); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::Relu, x, 0, 0, "relu", "ReluBackward"); }
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return unary(UnaryOp::LeakyRelu, x, negative_slope, 0, "leaky_relu", "LeakyReluBackward");
}

// --- BCE with logits ----------------------------------------------------------------------------------

Tensor bce_with_logits(const Tensor& x, const Tensor& target) {
  const char* name = "bce_with_logits";
  detail::check_defined(x, name, "input");
  detail::check_defined(target, name, "target");
  Y9_CHECK_SHAPE(x.dtype() == target.dtype(), name, ": dtypes differ: ", x.str(), " and ", target.str());
  engine::check_same_device({x, target}, name);
  const Shape shape = engine::broadcast_shapes(x.shape(), target.shape(), name);
  auto k = engine::kernel(kernels::kBceWithLogitsForward, x.dtype(), x.device());
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  if (y.numel() > 0)
    k.fn(k.ctx, x.dtype(), y.data_ptr(), engine::layout_for(y, shape, name), x.data_ptr(),
         engine::layout_for(x, shape, name), target.data_ptr(), engine::layout_for(target, shape, name));
  if (!engine::autograd::needs_grad({x, target})) return y;
  const bool need_x = x.requires_grad(), need_t = target.requires_grad();
  const Tensor xd = x.detach(), td = target.detach();
  engine::autograd::record_fn("BceWithLogitsBackward", {x, target}, {y},
                              [xd, td, need_x, need_t, shape, name](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor(), Tensor()};
    Tensor dy = g[0].to(xd.dtype());
    Tensor dx = need_x ? Tensor::empty(shape, xd.dtype(), xd.device()) : Tensor();
    Tensor dt = need_t ? Tensor::empty(shape, xd.dtype(), xd.device()) : Tensor();
    if (dy.numel() > 0) {
      auto kb = engine::kernel(kernels::kBceWithLogitsBackward, xd.dtype(), xd.device());
      auto ld = engine::layout_for(dy, shape, name);
      kb.fn(kb.ctx, xd.dtype(), xd.data_ptr(), engine::layout_for(xd, shape, name), td.data_ptr(),
            engine::layout_for(td, shape, name), dy.data_ptr(), ld, need_x ? dx.data_ptr() : nullptr,
            need_x ? engine::layout_for(dx, shape, name) : ld, need_t ? dt.data_ptr() : nullptr,
            need_t ? engine::layout_for(dt, shape, name) : ld);
    }
    if (need_x) dx = engine::sum_to(dx, xd.shape());
    if (need_t) dt = engine::sum_to(dt, td.shape());
    return std::vector<Tensor>{dx, dt};
  });
  return y;
}

}  // namespace ops
