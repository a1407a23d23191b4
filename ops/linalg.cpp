// matmul (batched, broadcasting batch dims, OpenBLAS GEMM on the CPU) and softmax/log_softmax.
// matmul backward: dA = dY x B^T, dB = A^T x dY, each reduced over broadcast batch dims with
// sum_to; transposes are passed to BLAS as flags, never copied.
#include "engine/autograd.h"
#include "kernels/common/linalg.h"
#include "ops/autocast.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace ops {

using engine::Shape;
using engine::Tensor;
using kernels::GemmOperand;

namespace {

// Whether a [rows, cols] matrix with strides (sr, sc) can be handed to row-major BLAS, and how.
bool blas_view(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool& trans, int64_t& ld) {
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cols)) {
    trans = false;
    ld = rows == 1 ? std::max<int64_t>(cols, 1) : sr;
    return ld >= std::max<int64_t>(cols, 1);
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rows)) {
    trans = true;
    ld = cols == 1 ? std::max<int64_t>(rows, 1) : sc;
    return ld >= std::max<int64_t>(rows, 1);
  }
  return false;
}

GemmOperand operand_for(Tensor& t, const Shape& batch, const char* op) {
  const int64_t nd = t.dim();
  GemmOperand g;
  if (!blas_view(t.size(nd - 2), t.size(nd - 1), t.stride(nd - 2), t.stride(nd - 1), g.trans, g.ld)) {
    engine::autograd::NoGradGuard ng;
    t = t.contiguous();
    blas_view(t.size(nd - 2), t.size(nd - 1), t.stride(nd - 2), t.stride(nd - 1), g.trans, g.ld);
  }
  g.ptr = t.data_ptr();
  Y9_CHECK_SHAPE(batch.size() <= static_cast<size_t>(kernels::kMaxDims), op, ": too many batch dims in ",
                 t.str());
  g.batch.ndim = static_cast<int>(batch.size());
  const size_t lead = batch.size() - static_cast<size_t>(nd - 2);
  for (size_t i = 0; i < batch.size(); ++i) {
    g.batch.sizes[i] = batch[i];
    g.batch.strides[i] = (i < lead || t.size(static_cast<int64_t>(i - lead)) == 1) ? 0 : t.stride(static_cast<int64_t>(i - lead));
  }
  return g;
}

Tensor matmul_raw(const Tensor& a_in, const Tensor& b_in) {
  const char* op = "matmul";
  Y9_CHECK_SHAPE(a_in.dim() >= 2 && b_in.dim() >= 2 && a_in.size(-1) == b_in.size(-2), op,
                 ": shapes ", engine::shape_str(a_in.shape()), " and ", engine::shape_str(b_in.shape()),
                 " are not [..., M, K] x [..., K, N]");
  Y9_CHECK_SHAPE(a_in.dtype() == b_in.dtype() && a_in.device() == b_in.device(), op,
                 ": dtype/device mismatch between ", a_in.str(), " and ", b_in.str());
  Shape ba(a_in.shape().begin(), a_in.shape().end() - 2), bb(b_in.shape().begin(), b_in.shape().end() - 2);
  Shape batch = engine::broadcast_shapes(ba, bb, op);
  const int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  auto kern = engine::kernel(kernels::kMatmulForward, a_in.dtype(), a_in.device());
  Tensor out = Tensor::empty(out_shape, a_in.dtype(), a_in.device());
  if (out.numel() == 0) return out;
  Tensor a = a_in.detach(), b = b_in.detach();
  GemmOperand ga = operand_for(a, batch, op), gb = operand_for(b, batch, op);
  kern.fn(kern.ctx, a.dtype(), ga, gb, out.data_ptr(), m, n, k);
  return out;
}

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  detail::check_defined(x, op, "input");
  Y9_CHECK_SHAPE(x.dim() > 0, op, ": 0-d input ", x.str());
  const int64_t d = x.wrap_dim(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  const int64_t n = x.size(d);
  auto k = engine::kernel(kernels::kSoftmaxForward, x.dtype(), x.device());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor xc = engine::contiguous_nograd(x);
  if (y.numel() > 0) k.fn(k.ctx, x.dtype(), xc.data_ptr(), y.data_ptr(), outer, n, inner, log);
  Tensor ys = y.detach();
  engine::autograd::record_fn(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x}, {y},
                              [ys, outer, n, inner, log, op](const std::vector<Tensor>& g) {
                                if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
                                Tensor dy = g[0].contiguous();
                                auto kb = engine::kernel(kernels::kSoftmaxBackward, dy.dtype(), dy.device());
                                Tensor dx = Tensor::empty(ys.shape(), ys.dtype(), ys.device());
                                if (dx.numel() > 0)
                                  kb.fn(kb.ctx, dy.dtype(), ys.data_ptr(), dy.data_ptr(), dx.data_ptr(), outer, n,
                                        inner, log);
                                return std::vector<Tensor>{dx};
                              });
  return y;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  detail::check_defined(a_in, "matmul", "first operand");
  detail::check_defined(b_in, "matmul", "second operand");
  // Autocast (ops/autocast.h): CUDA operands in the autocast dtype, through differentiable casts.
  const Tensor a = autocast_operand(a_in), b = autocast_operand(b_in);
  Tensor out = matmul_raw(a, b);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  engine::autograd::record_fn("MatmulBackward", {a, b}, {out}, [a, b, need_a, need_b](const std::vector<Tensor>& g) {
    std::vector<Tensor> r(2);
    if (!g[0].defined()) return r;
    const Tensor dy = g[0].to(a.dtype());
    if (need_a) r[0] = engine::sum_to(matmul_raw(dy, b.detach().transpose(-1, -2)), a.shape());
    if (need_b) r[1] = engine::sum_to(matmul_raw(a.detach().transpose(-1, -2), dy), b.shape());
    return r;
  });
  return out;
}

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace ops
