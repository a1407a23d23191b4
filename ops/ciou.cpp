// ciou op (ops/ciou.h): validation, CPU dispatch, autograd node.
#include "ops/ciou.h"

#include "engine/autograd.h"
#include "kernels/cpu/box_loss.h"

namespace ops {

using engine::DType;
using engine::Tensor;

Tensor ciou(const Tensor& box1, const Tensor& box2, double eps) {
  Y9_CHECK_SHAPE(box1.defined() && box2.defined() && box1.dim() >= 1 && box1.size(-1) == 4 &&
                     box1.shape() == box2.shape(),
                 "ciou: box1 and box2 must both be [..., 4] of the same shape, got ", box1.str(), " and ",
                 box2.str());
  Y9_CHECK_SHAPE(box1.dtype() == box2.dtype() && (box1.dtype() == DType::F32 || box1.dtype() == DType::F64),
                 "ciou: dtypes must be equal f32 or f64, got ", box1.str(), " and ", box2.str());
  Y9_CHECK_SHAPE(box1.device().is_cpu() && box2.device().is_cpu(), "ciou: only the CPU kernel is built, got ",
                 box1.str());
  engine::Shape out_shape = box1.shape();
  out_shape.back() = 1;
  const int64_t n = box1.numel() / 4;
  Tensor a, b;
  {
    engine::autograd::NoGradGuard ng;
    a = box1.detach().contiguous();
    b = box2.detach().contiguous();
  }
  Tensor out = Tensor::empty(out_shape, box1.dtype());
  if (box1.dtype() == DType::F32)
    kernels::cpu::ciou_forward_cpu(a.data<float>(), b.data<float>(), out.data<float>(), n, eps);
  else
    kernels::cpu::ciou_forward_cpu(a.data<double>(), b.data<double>(), out.data<double>(), n, eps);
  engine::Shape in_shape = box1.shape();
  engine::autograd::record_fn(
      "CiouBackward", {box1, box2}, {out}, [a, b, n, eps, in_shape](const std::vector<Tensor>& g) {
        Tensor go = g[0].contiguous();
        Tensor ga = Tensor::empty(in_shape, a.dtype()), gb = Tensor::empty(in_shape, a.dtype());
        if (a.dtype() == DType::F32)
          kernels::cpu::ciou_backward_cpu(a.data<float>(), b.data<float>(), go.data<float>(), ga.data<float>(),
                                          gb.data<float>(), n, eps);
        else
          kernels::cpu::ciou_backward_cpu(a.data<double>(), b.data<double>(), go.data<double>(),
                                          ga.data<double>(), gb.data<double>(), n, eps);
        return std::vector<Tensor>{ga, gb};
      });
  return out;
}

}  // namespace ops
