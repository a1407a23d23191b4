// clip_grad_norm_ over a ParamStore's flat gradients (PyTorch 1.13 semantics), computed and applied
// on the gradients' device: the norm stays there until a caller reads it.
#include "apps/training/clip.h"

#include <algorithm>
#include <vector>

#include "kernels/common/optim.h"

namespace training {

Tensor grad_norm_async(const ParamStore& store) {
  std::vector<kernels::FlatRange> ranges;
  for (size_t i = 0; i < store.size(); ++i)
    if (store.trainable(i)) ranges.push_back({store.segment(i).offset, store.segment(i).numel});
  const Tensor& g = store.grads().flat;
  const engine::Device dev = g.defined() ? g.device() : engine::Device::cpu();
  const int64_t n = static_cast<int64_t>(ranges.size());
  Tensor norm = Tensor::empty({}, engine::DType::F32, dev);
  Tensor sums = Tensor::empty({std::max<int64_t>(n, 1)}, engine::DType::F64, dev);
  if (n > 0) {
    auto k = engine::kernel(kernels::kSumSquares, engine::DType::F32, dev);
    k.fn(k.ctx, g.data<float>(), ranges.data(), n, sums.data<double>());
  }
  auto kn = engine::kernel(kernels::kGradNormFromSums, engine::DType::F32, dev);
  kn.fn(kn.ctx, sums.data<double>(), n, norm.data<float>());
  return norm;
}

double grad_norm(const ParamStore& store) { return static_cast<double>(grad_norm_async(store).item<float>()); }

Tensor clip_grad_norm_async(const ParamStore& store, double max_norm) {
  Tensor norm = grad_norm_async(store);
  const Tensor& g = store.grads().flat;
  if (g.defined() && g.numel() > 0) {
    auto k = engine::kernel(kernels::kClipByNorm, engine::DType::F32, g.device());
    k.fn(k.ctx, g.data<float>(), g.numel(), norm.data<float>(), static_cast<float>(max_norm));
  }
  return norm;
}

double clip_grad_norm_(const ParamStore& store, double max_norm) {
  return static_cast<double>(clip_grad_norm_async(store, max_norm).item<float>());
}

}  // namespace training
