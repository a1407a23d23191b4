// conv2d: argument checks, dispatch through the backend of x's device (kernels/common/conv.h:
// oneDNN F32 and reference F64 on the CPU) and the autograd node computing the gradients of
// input, weight and bias; conv2d_silu, the inference form of a BN-folded Conv block.
#include "engine/autograd.h"
#include "kernels/common/conv.h"
#include "ops/autocast.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace ops {

using engine::DType;
using engine::Shape;
using engine::Tensor;

namespace {

std::pair<int64_t, int64_t> pair_arg(const std::vector<int64_t>& v, const char* name) {
  Y9_CHECK_SHAPE(v.size() == 1 || v.size() == 2, "conv2d: ", name, " needs 1 or 2 values, got ", v.size());
  return v.size() == 1 ? std::make_pair(v[0], v[0]) : std::make_pair(v[0], v[1]);
}

/// The checked geometry of conv2d(x, w, bias, ...) (operands already autocast); throws ShapeError
/// / Error as conv2d documents.
/// `blocked`: x may also be in the blocked layout [N, C / B, H, W, B] (ops::is_blocked), its
/// logical shape [N, C, H, W] then gives the geometry (and s.src_block = B).
kernels::Conv2dShape conv_shape(const Tensor& x, const Tensor& w, const Tensor& bias,
                                const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                const std::vector<int64_t>& dilation, int64_t groups, bool blocked = false) {
  Y9_CHECK_SHAPE((x.dim() == 4 || (blocked && is_blocked(x))) && w.dim() == 4,
                 "conv2d: x must be [N,C,H,W] and w [Cout,Cin/g,kh,kw], got ", x.str(), " and ", w.str());
  const Shape xs = logical_shape(x);
  Y9_CHECK_SHAPE(w.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
                 "conv2d: dtypes differ: x ", x.str(), ", w ", w.str(), bias.defined() ? ", bias " + bias.str() : "");
  engine::check_same_device({x, w, bias}, "conv2d");
  Y9_CHECK_SHAPE(groups >= 1 && xs[1] % groups == 0 && w.size(0) % groups == 0, "conv2d: groups ", groups,
                 " must divide Cin ", xs[1], " and Cout ", w.size(0));
  Y9_CHECK_SHAPE(w.size(1) * groups == xs[1], "conv2d: weight ", w.str(), " expects ", w.size(1) * groups,
                 " input channels (groups ", groups, "), x has ", xs[1]);
  Y9_CHECK_SHAPE(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)), "conv2d: bias ",
                 bias.defined() ? bias.str() : "", " must be [", w.size(0), "]");
  auto [sh, sw] = pair_arg(stride, "stride");
  auto [ph, pw] = pair_arg(padding, "padding");
  auto [dh, dw] = pair_arg(dilation, "dilation");
  Y9_CHECK_SHAPE(sh >= 1 && sw >= 1 && ph >= 0 && pw >= 0 && dh >= 1 && dw >= 1,
                 "conv2d: need stride >= 1, padding >= 0, dilation >= 1");

  kernels::Conv2dShape s{};
  s.n = xs[0], s.c_in = xs[1], s.h = xs[2], s.w = xs[3];
  s.src_block = is_blocked(x) ? x.size(4) : 0;
  s.c_out = w.size(0), s.kh = w.size(2), s.kw = w.size(3);
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw, s.dil_h = dh, s.dil_w = dw, s.groups = groups;
  s.bf16 = cpu_bf16_conv(x) ? 1 : 0;  // CPU autocast to BF16 (ops/autocast.h)
  s.h_out = (s.h + 2 * ph - dh * (s.kh - 1) - 1) / sh + 1;
  s.w_out = (s.w + 2 * pw - dw * (s.kw - 1) - 1) / sw + 1;
  Y9_CHECK_SHAPE(s.h + 2 * ph - dh * (s.kh - 1) - 1 >= 0 && s.w + 2 * pw - dw * (s.kw - 1) - 1 >= 0,
                 "conv2d: kernel ", w.str(), " (dilation ", dh, "x", dw, ") larger than padded input ", x.str());
  return s;
}

/// The output of a forward entry and the contiguous operands it read (kept by conv2d's backward).
/// xk: x's BF16 copy, when the forward kept it for the backward weights (kConv2dForwardKeepInput;
/// then the backward holds it instead of xc).
struct ForwardRun {
  Tensor y, xc, wc, xk;
};

/// Runs the forward entry `key` (kernels/common/conv.h) of x's device on geometry `s`:
/// y [n, c_out, h_out, w_out] in x's dtype (into `y_out` when defined: contiguous, that shape,
/// dtype and device, checked by the caller; else a new tensor), from contiguous copies of x, w and
/// bias (undefined: none), with the derived data of w's storage when it is frozen (a copy's fresh
/// storage is not). Throws NotSupportedError when the backend lacks the entry for the dtype.
template <typename Fn>
ForwardRun run_forward(const engine::KernelKey<Fn>& key, const kernels::Conv2dShape& s, const Tensor& x,
                       const Tensor& w, const Tensor& bias, const Tensor& y_out) {
  auto k = engine::kernel(key, x.dtype(), x.device());
  ForwardRun r{y_out.defined() ? y_out : Tensor::empty({s.n, s.c_out, s.h_out, s.w_out}, x.dtype(), x.device()),
               engine::contiguous_nograd(x), engine::contiguous_nograd(w), Tensor()};
  Tensor bc = bias.defined() ? engine::contiguous_nograd(bias) : Tensor();
  if (r.y.numel() > 0)
    k.fn(k.ctx, s, x.dtype(), r.xc.data_ptr(), r.wc.data_ptr(), bc.defined() ? bc.data_ptr() : nullptr,
         r.y.data_ptr(), r.wc.storage()->derived());
  return r;
}

/// Records conv2d's autograd node (when a gradient is needed) for the forward `run` of geometry `s`
/// on x, w, bias: dx, dw and dbias from the backward entries of x's device, in the layouts of `s`
/// (a blocked x gets a blocked dx; a blocked y takes a blocked dy).
void record_conv_backward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor& bias,
                          const ForwardRun& run) {
  if (!engine::autograd::needs_grad({x, w, bias})) return;
  const Tensor &y = run.y, &wc = run.wc;
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = bias.defined() && bias.requires_grad();
  // The backward weights reads x_dw: the forward's BF16 copy of x when it kept one (x_bf16), else xc.
  const Tensor x_dw = run.xk.defined() ? run.xk : run.xc;
  kernels::Conv2dShape sb = s;
  sb.x_bf16 = run.xk.defined() ? 1 : 0;
  const engine::DType dt = run.xc.dtype();
  const engine::Shape x_shape = run.xc.shape();
  engine::autograd::record_fn(
      "Conv2dBackward", {x, w, bias}, {y},
      [s = sb, x_dw, wc, dt, x_shape, need_x, need_w, need_b](const std::vector<Tensor>& g) {
        if (!g[0].defined()) return std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
        Tensor dy = engine::contiguous_nograd(g[0].to(dt));
        Tensor dx, dw, db;
        const engine::Backend& be = engine::backend(x_dw.device().type);
        if (be.supports(kernels::kConv2dBackward, dt)) {  // both directions in one call
          auto k = engine::kernel(kernels::kConv2dBackward, dt, x_dw.device());
          if (need_x) dx = Tensor::empty(x_shape, dt, x_dw.device());
          if (need_w || need_b) dw = Tensor::empty(wc.shape(), dt, wc.device());
          if (need_b) db = Tensor::empty({s.c_out}, dt, wc.device());
          k.fn(k.ctx, s, dt, x_dw.data_ptr(), dy.data_ptr(), wc.data_ptr(), need_x ? dx.data_ptr() : nullptr,
               dw.defined() ? dw.data_ptr() : nullptr, need_b ? db.data_ptr() : nullptr, wc.storage()->derived());
          if (!need_w) dw = Tensor();
          return std::vector<Tensor>{dx, dw, db};
        }
        Y9_CHECK(!s.x_bf16, "conv2d backward: a kept BF16 x needs the backend's kConv2dBackward");
        if (need_x) {
          auto kd = engine::kernel(kernels::kConv2dBackwardData, dt, x_dw.device());
          dx = Tensor::empty(x_shape, dt, x_dw.device());
          // The weight's storage is still frozen when it was at the forward (Optimizer::step thaws
          // it, after the backward): its kept layouts serve here too.
          kd.fn(kd.ctx, s, dt, dy.data_ptr(), wc.data_ptr(), dx.data_ptr(), wc.storage()->derived());
        }
        if (need_w || need_b) {
          // One pass computes both; the weight buffer is scratch when only the bias is needed.
          auto kw = engine::kernel(kernels::kConv2dBackwardWeights, dt, x_dw.device());
          dw = Tensor::empty(wc.shape(), dt, wc.device());
          if (need_b) db = Tensor::empty({s.c_out}, dt, wc.device());
          kw.fn(kw.ctx, s, dt, x_dw.data_ptr(), dy.data_ptr(), dw.data_ptr(), need_b ? db.data_ptr() : nullptr);
          if (!need_w) dw = Tensor();
        }
        return std::vector<Tensor>{dx, dw, db};
      });
}

/// The operands of conv2d_into / conv2d_silu_into (`op`), autocast, and their checked geometry.
struct IntoArgs {
  Tensor x, w, bias;
  kernels::Conv2dShape s;
};

/// Checks the output `out` of a convolution writing into it (`op`): defined by the caller, of shape
/// `want` and x's dtype and device, contiguous, and not overlapping a contiguous operand's bytes
/// (the kernels read the operands while writing out; a non-contiguous operand is copied first).
/// Throws ShapeError naming op, out and the operand.
void check_output(const char* op, const Tensor& out, const Shape& want, const Tensor& x, const Tensor& w,
                  const Tensor& bias) {
  Y9_CHECK_SHAPE(out.shape() == want && out.dtype() == x.dtype() && out.device() == x.device(), op, ": output ",
                 out.str(), " must be ", engine::shape_str(want), " in x's dtype and device (x ", x.str(), ")");
  Y9_CHECK_SHAPE(out.is_contiguous(), op, ": output ", out.str(), " must be contiguous");
  for (const Tensor* t : {&x, &w, &bias}) {
    if (!t->defined() || !t->is_contiguous() || t->storage() != out.storage()) continue;
    const auto* a = static_cast<const char*>(t->data_ptr());
    const auto* o = static_cast<const char*>(out.data_ptr());
    const size_t na = static_cast<size_t>(t->numel()) * engine::dtype_size(t->dtype()),
                 no = static_cast<size_t>(out.numel()) * engine::dtype_size(out.dtype());
    Y9_CHECK_SHAPE(a + na <= o || o + no <= a, op, ": output ", out.str(), " overlaps an operand ", t->str());
  }
}

/// Checks the operands as conv2d does, and `out` against their geometry: defined, contiguous,
/// [n, c_out, h_out, w_out], x's dtype and device, no gradient needed. Throws ShapeError / Error.
IntoArgs checked_into(const char* op, const Tensor& out, const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in,
                      const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                      const std::vector<int64_t>& dilation, int64_t groups) {
  Y9_CHECK_SHAPE(x_in.defined() && w_in.defined(), op, ": undefined input or weight");
  IntoArgs a{autocast_operand(x_in), autocast_operand(w_in), autocast_operand(bias_in), {}};
  a.s = conv_shape(a.x, a.w, a.bias, stride, padding, dilation, groups);
  const kernels::Conv2dShape& s = a.s;
  const Tensor &x = a.x, &w = a.w, &bias = a.bias;
  Y9_CHECK_SHAPE(out.defined(), op, ": undefined output");
  check_output(op, out, Shape{s.n, s.c_out, s.h_out, s.w_out}, x, w, bias);
  Y9_CHECK(!engine::autograd::needs_grad({x, w, bias}) && !out.requires_grad(), op,
           ": writes without autograd; call it with no gradient needed (engine::autograd::NoGradGuard)");
  return a;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  Y9_CHECK_SHAPE(x_in.defined() && w_in.defined(), "conv2d: undefined input or weight");
  // Autocast (ops/autocast.h): CUDA operands in the autocast dtype, through differentiable casts.
  const Tensor x = autocast_operand(x_in), w = autocast_operand(w_in), bias = autocast_operand(bias_in);
  const kernels::Conv2dShape s = conv_shape(x, w, bias, stride, padding, dilation, groups);
  const ForwardRun run = run_forward(kernels::kConv2dForward, s, x, w, bias, Tensor());
  record_conv_backward(s, x, w, bias, run);
  return run.y;
}

Tensor conv2d_silu(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, std::vector<int64_t> stride,
                   std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  Y9_CHECK_SHAPE(x_in.defined() && w_in.defined(), "conv2d: undefined input or weight");
  const Tensor x = autocast_operand(x_in), w = autocast_operand(w_in), bias = autocast_operand(bias_in);
  const bool fused = !engine::autograd::needs_grad({x, w, bias}) &&
                     engine::backend(x.device().type).supports(kernels::kConv2dBiasSiLUForward, x.dtype());
  if (!fused) return silu(conv2d(x, w, bias, std::move(stride), std::move(padding), std::move(dilation), groups));
  const kernels::Conv2dShape s = conv_shape(x, w, bias, stride, padding, dilation, groups);
  // A frozen weight (graph::fuse) lets the kernel keep it in its own layout (run_forward).
  return run_forward(kernels::kConv2dBiasSiLUForward, s, x, w, bias, Tensor()).y;
}

void conv2d_into(const Tensor& out, const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in,
                 std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation,
                 int64_t groups) {
  const IntoArgs a = checked_into("conv2d_into", out, x_in, w_in, bias_in, stride, padding, dilation, groups);
  run_forward(kernels::kConv2dForward, a.s, a.x, a.w, a.bias, out);
}

void conv2d_silu_into(const Tensor& out, const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in,
                      std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation,
                      int64_t groups) {
  const IntoArgs a = checked_into("conv2d_silu_into", out, x_in, w_in, bias_in, stride, padding, dilation, groups);
  if (!engine::backend(a.x.device().type).supports(kernels::kConv2dBiasSiLUForward, a.x.dtype())) {
    Tensor(out).copy_(silu(conv2d(a.x, a.w, a.bias, std::move(stride), std::move(padding), std::move(dilation),
                                  groups)));
    return;
  }
  run_forward(kernels::kConv2dBiasSiLUForward, a.s, a.x, a.w, a.bias, out);
}

}  // namespace ops

// --- blocked layout (CPU inference and training) ------------------------------------------------

namespace ops {

namespace {

/// The operands of conv2d_blocked / conv2d_blocked_into (`op`) and their geometry with the
/// layouts: x plain or blocked, the output blocked by `out_block` (0: plain). Throws as
/// conv2d_blocked documents.
IntoArgs blocked_args(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                      const std::vector<int64_t>& dilation, int64_t groups, int64_t out_block, bool winograd) {
  Y9_CHECK_SHAPE(x.defined() && w.defined(), op, ": undefined input or weight");
  Y9_CHECK_SHAPE(x.device().is_cpu() && x.dtype() == DType::F32, op, ": the blocked layout is CPU F32 only, got x ",
                 x.str());
  IntoArgs a{x, w, bias, conv_shape(x, w, bias, stride, padding, dilation, groups, /*blocked=*/true)};
  Y9_CHECK_SHAPE(out_block == 0 || ((out_block == 8 || out_block == 16) && a.s.c_out % out_block == 0), op,
                 ": output block ", out_block, " must be 0, 8 or 16 and divide the ", a.s.c_out, " output channels");
  a.s.dst_block = out_block;
  a.s.winograd = winograd ? 1 : 0;
  return a;
}

/// Runs the forward entry of `a` (the fused SiLU one when `silu`) into y (contiguous, checked).
void run_blocked(const IntoArgs& a, bool silu, const Tensor& y) {
  const Tensor xc = engine::contiguous_nograd(a.x), wc = engine::contiguous_nograd(a.w);
  const Tensor bc = a.bias.defined() ? engine::contiguous_nograd(a.bias) : Tensor();
  if (y.numel() == 0) return;
  if (silu) {
    auto k = engine::kernel(kernels::kConv2dBiasSiLUForward, xc.dtype(), xc.device());
    k.fn(k.ctx, a.s, xc.dtype(), xc.data_ptr(), wc.data_ptr(), bc.defined() ? bc.data_ptr() : nullptr,
         y.data_ptr(), wc.storage()->derived());
  } else {
    auto k = engine::kernel(kernels::kConv2dForward, xc.dtype(), xc.device());
    k.fn(k.ctx, a.s, xc.dtype(), xc.data_ptr(), wc.data_ptr(), bc.defined() ? bc.data_ptr() : nullptr,
         y.data_ptr(), wc.storage()->derived());
  }
}

Shape out_shape(const kernels::Conv2dShape& s) {
  if (s.dst_block) return {s.n, s.c_out / s.dst_block, s.h_out, s.w_out, s.dst_block};
  return {s.n, s.c_out, s.h_out, s.w_out};
}

}  // namespace

Tensor conv2d_blocked(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
                      const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, int64_t groups,
                      bool silu, int64_t out_block, bool winograd) {
  IntoArgs a = blocked_args("conv2d_blocked", x, w, bias, stride, padding, dilation, groups, out_block, winograd);
  if (engine::autograd::needs_grad({x, w, bias})) {
    // Training: the plain convolution entry in the blocked layouts (Winograd where `winograd` and
    // the geometry allow, in the forward and both backward directions alike), its autograd node,
    // then SiLU as its own differentiable op.
    ForwardRun run{Tensor::empty(out_shape(a.s), x.dtype(), x.device()), engine::contiguous_nograd(x),
                   engine::contiguous_nograd(w), Tensor()};
    const engine::Backend& be = engine::backend(x.device().type);
    if (a.s.bf16 && a.s.src_block && w.requires_grad() && run.y.numel() > 0 &&
        be.supports(kernels::kConv2dBackward, x.dtype()) && be.supports(kernels::kConv2dForwardKeepInput, x.dtype())) {
      // BF16 math: the forward's BF16 conversion of x is kept for the backward weights (one
      // conversion, not two; half the bytes of x held until the backward).
      Tensor xk = Tensor::empty(run.xc.shape(), DType::BF16, x.device());
      const Tensor bc = a.bias.defined() ? engine::contiguous_nograd(a.bias) : Tensor();
      auto k = engine::kernel(kernels::kConv2dForwardKeepInput, x.dtype(), x.device());
      if (k.fn(k.ctx, a.s, x.dtype(), run.xc.data_ptr(), run.wc.data_ptr(), bc.defined() ? bc.data_ptr() : nullptr,
               run.y.data_ptr(), run.wc.storage()->derived(), xk.data_ptr()))
        run.xk = xk;
    } else {
      run_blocked(IntoArgs{run.xc, run.wc, a.bias, a.s}, false, run.y);  // the copies made once
    }
    record_conv_backward(a.s, x, w, bias, run);
    return silu ? ops::silu(run.y) : run.y;
  }
  if (!silu) a.s.winograd = 0;  // inference: Winograd with the fused SiLU only
  Tensor y = Tensor::empty(out_shape(a.s), x.dtype(), x.device());
  run_blocked(a, silu, y);
  return y;
}

void conv2d_blocked_into(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                         const std::vector<int64_t>& dilation, int64_t groups, bool silu, bool winograd) {
  Y9_CHECK_SHAPE(out.defined(), "conv2d_blocked_into: undefined output");
  const int64_t out_block = is_blocked(out) ? out.size(4) : 0;
  IntoArgs a = blocked_args("conv2d_blocked_into", x, w, bias, stride, padding, dilation, groups, out_block, winograd);
  check_output("conv2d_blocked_into", out, out_shape(a.s), x, w, bias);
  if (!silu) a.s.winograd = 0;  // inference: Winograd with the fused SiLU only (as conv2d_blocked)
  Y9_CHECK(!engine::autograd::needs_grad({x, w, bias}) && !out.requires_grad(), "conv2d_blocked_into",
           ": writes without autograd; call it with no gradient needed (engine::autograd::NoGradGuard)");
  run_blocked(a, silu, out);
}

}  // namespace ops
