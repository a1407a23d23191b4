// dfl op (ops/dfl.h): validation, CPU dispatch, autograd node.
#include "ops/dfl.h"

#include "engine/autograd.h"
#include "kernels/cpu/box_loss.h"

namespace ops {

using engine::DType;
using engine::Tensor;

Tensor dfl(const Tensor& pred_dist, const Tensor& target) {
  Y9_CHECK_SHAPE(pred_dist.defined() && target.defined() && pred_dist.dim() == 3 && pred_dist.size(1) == 4 &&
                     target.dim() == 2 && target.size(0) == pred_dist.size(0) && target.size(1) == 4 &&
                     pred_dist.size(2) >= 2,
                 "dfl: pred_dist [P, 4, nbins] and target [P, 4] expected, got ", pred_dist.str(), " and ",
                 target.str());
  Y9_CHECK_SHAPE(pred_dist.dtype() == target.dtype() &&
                     (pred_dist.dtype() == DType::F32 || pred_dist.dtype() == DType::F64),
                 "dfl: dtypes must be equal f32 or f64, got ", pred_dist.str(), " and ", target.str());
  Y9_CHECK_SHAPE(pred_dist.device().is_cpu() && target.device().is_cpu(), "dfl: only the CPU kernel is built");
  const int64_t P = pred_dist.size(0);
  const int nbins = static_cast<int>(pred_dist.size(2));
  Tensor x, t;
  {
    engine::autograd::NoGradGuard ng;
    x = pred_dist.detach().contiguous();
    t = target.detach().contiguous();
  }
  // Targets outside [0, nbins - 1) would index past the distribution.
  Tensor out = Tensor::empty({P, 1}, pred_dist.dtype());
  if (x.dtype() == DType::F32)
    kernels::cpu::dfl_forward_cpu(x.data<float>(), t.data<float>(), out.data<float>(), P, nbins);
  else
    kernels::cpu::dfl_forward_cpu(x.data<double>(), t.data<double>(), out.data<double>(), P, nbins);
  engine::autograd::record_fn("DflBackward", {pred_dist}, {out}, [x, t, P, nbins](const std::vector<Tensor>& g) {
    Tensor go = g[0].contiguous();
    Tensor gx = Tensor::empty(x.shape(), x.dtype());
    if (x.dtype() == DType::F32)
      kernels::cpu::dfl_backward_cpu(x.data<float>(), t.data<float>(), go.data<float>(), gx.data<float>(), P, nbins);
    else
      kernels::cpu::dfl_backward_cpu(x.data<double>(), t.data<double>(), go.data<double>(), gx.data<double>(), P,
                                     nbins);
    return std::vector<Tensor>{gx};
  });
  return out;
}

}  // namespace ops
