// ciou op (ops/ciou.h): validation, dispatch through the backend of the boxes' device
// (kernels/common/box_loss.h), autograd node.
#include "ops/ciou.h"

#include "engine/autograd.h"
#include "kernels/common/box_loss.h"
#include "ops/dispatch.h"

namespace ops {

using engine::Tensor;

Tensor ciou(const Tensor& box1, const Tensor& box2, double eps) {
  Y9_CHECK_SHAPE(box1.defined() && box2.defined() && box1.dim() >= 1 && box1.size(-1) == 4 &&
                     box1.shape() == box2.shape(),
                 "ciou: box1 and box2 must both be [..., 4] of the same shape, got ", box1.str(), " and ",
                 box2.str());
  Y9_CHECK_SHAPE(box1.dtype() == box2.dtype(), "ciou: dtypes differ: ", box1.str(), " and ", box2.str());
  engine::check_same_device({box1, box2}, "ciou");
  auto k = engine::kernel(kernels::kCiouForward, box1.dtype(), box1.device());
  engine::Shape out_shape = box1.shape();
  out_shape.back() = 1;
  const int64_t n = box1.numel() / 4;
  Tensor a = engine::contiguous_nograd(box1), b = engine::contiguous_nograd(box2);
  Tensor out = Tensor::empty(out_shape, box1.dtype(), box1.device());
  k.fn(k.ctx, a.dtype(), a.data_ptr(), b.data_ptr(), out.data_ptr(), n, eps);
  engine::Shape in_shape = box1.shape();
  engine::autograd::record_fn("CiouBackward", {box1, box2}, {out}, [a, b, n, eps, in_shape](const std::vector<Tensor>& g) {
    Tensor go = g[0].to(a.dtype()).contiguous();
    auto kb = engine::kernel(kernels::kCiouBackward, a.dtype(), a.device());
    Tensor ga = Tensor::empty(in_shape, a.dtype(), a.device()), gb = Tensor::empty(in_shape, a.dtype(), a.device());
    kb.fn(kb.ctx, a.dtype(), a.data_ptr(), b.data_ptr(), go.data_ptr(), ga.data_ptr(), gb.data_ptr(), n, eps);
    return std::vector<Tensor>{ga, gb};
  });
  return out;
}

}  // namespace ops
