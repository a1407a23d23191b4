// The blocked channel layout of the CPU (ops/ops.h, issue 15 item 1): layout queries and
// conversions (differentiable). The blocked convolutions are in ops/conv.cpp, the blocked spatial
// ops in ops/spatial.cpp.
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

namespace {

/// The layout conversion of contiguous x (n, c, hw) into a new tensor of shape `out` through the
/// backend's kBlockedReorder (CPU), with its autograd node (the reverse conversion).
Tensor reorder(const Tensor& x, int64_t n, int64_t c, int64_t hw, int64_t block, bool to, const Shape& out) {
  const Tensor xc = engine::contiguous_nograd(x);
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  auto k = engine::kernel(kernels::kBlockedReorder, x.dtype(), x.device());
  if (y.numel() > 0) k.fn(k.ctx, x.dtype(), xc.data_ptr(), n, c, hw, block, to, y.data_ptr());
  const Shape in = x.shape();
  engine::autograd::record_fn(to ? "ToBlockedBackward" : "FromBlockedBackward", {x}, {y},
                              [n, c, hw, block, to, in](const std::vector<Tensor>& g) {
                                if (!g[0].defined()) return std::vector<Tensor>{Tensor()};
                                return std::vector<Tensor>{reorder(g[0], n, c, hw, block, !to, in)};
                              });
  return y;
}

/// Whether x's backend converts its dtype (kBlockedReorder: CPU F32/F64); others take a strided copy.
bool has_reorder(const Tensor& x) {
  return engine::backend(x.device().type).supports(kernels::kBlockedReorder, x.dtype());
}

}  // namespace

Tensor to_blocked(const Tensor& x, int64_t block) {
  detail::check_defined(x, "to_blocked", "input");
  Y9_CHECK_SHAPE(x.dim() == 4 && (block == 8 || block == 16) && x.size(1) % block == 0, "to_blocked: ", x.str(),
                 " cannot take channel block ", block, " (need [N, C, H, W] with C a multiple of 8 or 16)");
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  if (!has_reorder(x))  // a strided copy
    return x.reshape({n, c / block, block, h, w}).permute({0, 1, 3, 4, 2}).contiguous();
  return reorder(x, n, c, h * w, block, true, {n, c / block, h, w, block});
}

Tensor from_blocked(const Tensor& x) {
  detail::check_defined(x, "from_blocked", "input");
  if (!is_blocked(x)) return x;
  const Shape s = logical_shape(x);
  if (!has_reorder(x)) return x.permute({0, 1, 4, 2, 3}).reshape(s);
  return reorder(x, s[0], s[1], s[2] * s[3], x.size(4), false, s);
}

}  // namespace ops
