// dfl op (ops/dfl.h): validation, dispatch through the backend of pred_dist's device
// (kernels/common/box_loss.h), autograd node.
#include "ops/dfl.h"

#include "engine/autograd.h"
#include "kernels/common/box_loss.h"
#include "ops/dispatch.h"

namespace ops {

using engine::Tensor;

Tensor dfl(const Tensor& pred_dist, const Tensor& target) {
  Y9_CHECK_SHAPE(pred_dist.defined() && target.defined() && pred_dist.dim() == 3 && pred_dist.size(1) == 4 &&
                     target.dim() == 2 && target.size(0) == pred_dist.size(0) && target.size(1) == 4 &&
                     pred_dist.size(2) >= 2,
                 "dfl: pred_dist [P, 4, nbins] and target [P, 4] expected, got ", pred_dist.str(), " and ",
                 target.str());
  Y9_CHECK_SHAPE(pred_dist.dtype() == target.dtype(), "dfl: dtypes differ: ", pred_dist.str(), " and ", target.str());
  engine::check_same_device({pred_dist, target}, "dfl");
  auto k = engine::kernel(kernels::kDflForward, pred_dist.dtype(), pred_dist.device());
  const int64_t P = pred_dist.size(0);
  const int nbins = static_cast<int>(pred_dist.size(2));
  Tensor x = engine::contiguous_nograd(pred_dist), t = engine::contiguous_nograd(target);
  Tensor out = Tensor::empty({P, 1}, pred_dist.dtype(), pred_dist.device());
  k.fn(k.ctx, x.dtype(), x.data_ptr(), t.data_ptr(), out.data_ptr(), P, nbins);
  engine::autograd::record_fn("DflBackward", {pred_dist}, {out}, [x, t, P, nbins](const std::vector<Tensor>& g) {
    Tensor go = g[0].to(x.dtype()).contiguous();
    auto kb = engine::kernel(kernels::kDflBackward, x.dtype(), x.device());
    Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
    kb.fn(kb.ctx, x.dtype(), x.data_ptr(), t.data_ptr(), go.data_ptr(), gx.data_ptr(), P, nbins);
    return std::vector<Tensor>{gx};
  });
  return out;
}

}  // namespace ops
