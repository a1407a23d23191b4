// The blocked channel layout of CPU inference (ops/ops.h, issue 15 item 1): layout queries and
// conversions. The blocked convolutions are in ops/conv.cpp, the blocked spatial ops in
// ops/spatial.cpp.
#include "engine/autograd.h"
#include "kernels/common/blocked.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace ops {

using engine::Shape;
using engine::Tensor;

int64_t channel_block(engine::Device device) {
  if (!device.is_cpu()) return 0;
  auto k = engine::kernel(kernels::kPreferredChannelBlock, engine::DType::F32, device);
  return k.fn(k.ctx);
}

bool is_blocked(const Tensor& x) { return x.dim() == 5 && (x.size(4) == 8 || x.size(4) == 16); }

Shape logical_shape(const Tensor& x) {
  if (!is_blocked(x)) return x.shape();
  return {x.size(0), x.size(1) * x.size(4), x.size(2), x.size(3)};
}

Tensor to_blocked(const Tensor& x, int64_t block) {
  detail::check_defined(x, "to_blocked", "input");
  Y9_CHECK_SHAPE(x.dim() == 4 && (block == 8 || block == 16) && x.size(1) % block == 0, "to_blocked: ", x.str(),
                 " cannot take channel block ", block, " (need [N, C, H, W] with C a multiple of 8 or 16)");
  engine::autograd::NoGradGuard ng;
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return x.reshape({n, c / block, block, h, w}).permute({0, 1, 3, 4, 2}).contiguous();
}

Tensor from_blocked(const Tensor& x) {
  detail::check_defined(x, "from_blocked", "input");
  if (!is_blocked(x)) return x;
  engine::autograd::NoGradGuard ng;
  const Shape s = logical_shape(x);
  return x.permute({0, 1, 4, 2, 3}).reshape(s);
}

}  // namespace ops
