// ops::cbfuse (ops/cbfuse.h): argument checks, the fused forward entry (pieces passed as base
// pointer + strides, never copied) and the autograd node whose backward writes every piece's
// gradient through one entry call.
#include "ops/cbfuse.h"

#include "engine/autograd.h"
#include "kernels/common/cbfuse.h"
#include "ops/dispatch.h"

namespace ops {

using engine::Shape;
using engine::Tensor;
using kernels::CBFuseGeom;
using kernels::CBFusePiece;

Tensor cbfuse(const std::vector<Tensor>& pieces, const Tensor& x) {
  detail::check_defined(x, "cbfuse", "x");
  Y9_CHECK_SHAPE(x.dim() == 4, "cbfuse: expected x [N, C, H, W], got shape ", engine::shape_str(x.shape()));
  if (pieces.empty()) return x;
  CBFuseGeom g{};
  g.n = x.size(0);
  g.c = x.size(1);
  g.h = x.size(2);
  g.w = x.size(3);
  for (int d = 0; d < 4; ++d) g.xs[d] = x.stride(d);
  std::vector<CBFusePiece> ps;
  std::vector<int64_t> factors;
  for (const Tensor& p : pieces) {
    detail::check_defined(p, "cbfuse", "a piece");
    Y9_CHECK_SHAPE(p.dtype() == x.dtype() && p.device() == x.device(), "cbfuse: piece ", p.str(), " and x ", x.str(),
                   " differ in dtype or device");
    Y9_CHECK_SHAPE(p.dim() == 4 && p.size(0) == g.n && p.size(1) == g.c, "cbfuse: piece of shape ",
                   engine::shape_str(p.shape()), " does not match x's N and C (x ", engine::shape_str(x.shape()), ")");
    const int64_t ph = p.size(2), pw = p.size(3);
    Y9_CHECK_SHAPE(ph > 0 && pw > 0 && ph <= g.h && g.h % ph == 0 && g.w % pw == 0 && g.h / ph == g.w / pw,
                   "cbfuse: cannot resize piece ", engine::shape_str(p.shape()), " to ", g.h, "x", g.w,
                   " by one integer factor");
    CBFusePiece cp{};
    cp.data = p.data_ptr();
    for (int d = 0; d < 4; ++d) cp.s[d] = p.stride(d);
    cp.f = g.h / ph;
    ps.push_back(cp);
    factors.push_back(cp.f);
  }
  auto k = engine::kernel(kernels::kCBFuseForward, x.dtype(), x.device());
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) k.fn(k.ctx, x.dtype(), ps.data(), static_cast<int>(ps.size()), x.data_ptr(), g, out.data_ptr());

  std::vector<Tensor> inputs = pieces;
  inputs.push_back(x);
  if (!engine::autograd::needs_grad(inputs)) return out;
  std::vector<bool> need;
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) {
    need.push_back(t.requires_grad());
    shapes.push_back(t.shape());
  }
  auto backward = [g, factors, need, shapes](const std::vector<Tensor>& gr) {
    std::vector<Tensor> r(shapes.size());
    if (!gr[0].defined()) return r;
    const size_t np = factors.size();
    if (need[np]) r[np] = gr[0];  // d(... + x)/dx: the gradient itself, as the unfused add gives it
    std::vector<void*> dxs(np, nullptr);
    bool any = false;
    for (size_t i = 0; i < np; ++i) {
      if (!need[i]) continue;
      r[i] = Tensor::empty(shapes[i], gr[0].dtype(), gr[0].device());
      dxs[i] = r[i].data_ptr();
      any = true;
    }
    if (any && gr[0].numel() > 0) {
      Tensor dy = gr[0].contiguous();
      auto kb = engine::kernel(kernels::kCBFuseBackward, dy.dtype(), dy.device());
      kb.fn(kb.ctx, dy.dtype(), dy.data_ptr(), g, factors.data(), dxs.data(), static_cast<int>(np));
    }
    return r;
  };
  engine::autograd::record_fn("CBFuseBackward", inputs, {out}, backward);
  return out;
}

}  // namespace ops
