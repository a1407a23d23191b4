// clip_grad_norm_ over a ParamStore's flat gradients (PyTorch 1.13 semantics).
#include "apps/training/clip.h"

#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "kernels/common/optim.h"

namespace training {

double grad_norm(const ParamStore& store) {
  std::vector<kernels::FlatRange> ranges;
  for (size_t i = 0; i < store.size(); ++i)
    if (store.trainable(i)) ranges.push_back({store.segment(i).offset, store.segment(i).numel});
  if (ranges.empty()) return 0.0;
  const Tensor& g = store.grads().flat;
  Tensor sums = Tensor::empty({static_cast<int64_t>(ranges.size())}, engine::DType::F64, g.device());
  auto k = engine::kernel(kernels::kSumSquares, engine::DType::F32, g.device());
  k.fn(k.ctx, g.data<float>(), ranges.data(), static_cast<int64_t>(ranges.size()), sums.data<double>());
  double sum = 0.0;
  for (double s : sums.to_vector<double>()) {
    // torch.norm(g) is an FP32 tensor; torch.norm(stack(norms)) squares those FP32 values.
    const float n = static_cast<float>(std::sqrt(s));
    sum += static_cast<double>(n) * static_cast<double>(n);
  }
  return static_cast<double>(static_cast<float>(std::sqrt(sum)));
}

double clip_grad_norm_(const ParamStore& store, double max_norm) {
  const double total = grad_norm(store);
  const float coef = static_cast<float>(max_norm) / (static_cast<float>(total) + 1e-6f);
  if (!(coef >= 1.0f)) {  // NaN coef (non-finite norm) multiplies too, as torch.clamp keeps NaN
    engine::autograd::NoGradGuard ng;
    Tensor(store.grads().flat).mul_(static_cast<double>(coef));
  }
  return total;
}

}  // namespace training
