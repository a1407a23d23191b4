// clip_grad_norm_ over parameter gradients (PyTorch 1.13 semantics).
#include "engine/clip.h"

#include <cmath>

#include "kernels/cpu/optim.h"

namespace engine {

namespace {
const float* grad_ptr(const Tensor& g) {
  Y9_CHECK(g.dtype() == DType::F32 && g.device().is_cpu() && g.is_contiguous(),
           "clip_grad_norm_: gradient ", g.str(), " must be F32, CPU and contiguous");
  return g.data<float>();
}
}  // namespace

double grad_norm(const std::vector<Tensor>& params) {
  double sum = 0.0;
  for (const Tensor& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    const Tensor& g = p.grad();
    // torch.norm(g) is an FP32 tensor; torch.norm(stack(norms)) squares those FP32 values.
    const float n = static_cast<float>(std::sqrt(kernels::cpu::sum_squares_cpu(grad_ptr(g), g.numel())));
    sum += static_cast<double>(n) * static_cast<double>(n);
  }
  return static_cast<double>(static_cast<float>(std::sqrt(sum)));
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  const double total = grad_norm(params);
  const float coef = static_cast<float>(max_norm) / (static_cast<float>(total) + 1e-6f);
  if (!(coef >= 1.0f)) {  // NaN coef (non-finite norm) multiplies too, as torch.clamp keeps NaN
    for (const Tensor& p : params) {
      if (!p.defined() || !p.grad().defined()) continue;
      const Tensor& g = p.grad();
      kernels::cpu::scale_cpu(g.data<float>(), g.numel(), coef);
    }
  }
  return total;
}

double clip_grad_norm_(const std::vector<std::pair<std::string, Tensor>>& params, double max_norm) {
  std::vector<Tensor> ts;
  ts.reserve(params.size());
  for (const auto& np : params) ts.push_back(np.second);
  return clip_grad_norm_(ts, max_norm);
}

}  // namespace engine
