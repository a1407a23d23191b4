// Spatial ops on NCHW tensors: upsample_nearest, max_pool2d, avg_pool2d (PyTorch semantics:
// floor output size, implicit -inf padding for max, count_include_pad=true for avg).
// Official use: nn.Upsample(None, 2, 'nearest'), SPPELAN's MaxPool2d(5, 1, 2), ADown's
// avg_pool2d(x, 2, 1, 0) and MaxPool2d(3, 2, 1) (yolov9 models/common.py).
#include "engine/autograd.h"
#include "kernels/common/blocked.h"
#include "kernels/common/spatial.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace ops {

using engine::Shape;
using engine::Tensor;
using kernels::Plane2d;

namespace {

Plane2d plane_of(const Tensor& x, int64_t ho, int64_t wo) {
  Plane2d g{};
  g.n = x.size(0);
  g.c = x.size(1);
  g.h = x.size(2);
  g.w = x.size(3);
  for (int i = 0; i < 4; ++i) g.xs[i] = x.stride(i);
  g.ho = ho;
  g.wo = wo;
  return g;
}

void check_nchw(const Tensor& x, const char* op) {
  detail::check_defined(x, op, "input");
  Y9_CHECK_SHAPE(x.dim() == 4, op, ": expected x [N, C, H, W], got shape ", engine::shape_str(x.shape()));
}

// Output size of a floor-mode pooling window; throws on bad settings.
int64_t pool_out(const Tensor& x, int64_t size, int64_t k, int64_t s, int64_t p, const char* op) {
  Y9_CHECK_SHAPE(k > 0 && s > 0 && p >= 0 && p <= k / 2, op, ": kernel ", k, ", stride ", s, ", padding ", p,
                 " invalid (need k > 0, stride > 0, 0 <= padding <= k/2) for shape ",
                 engine::shape_str(x.shape()));
  const int64_t o = (size + 2 * p - k) / s + 1;
  Y9_CHECK_SHAPE(size + 2 * p >= k && o > 0, op, ": kernel ", k, " larger than padded input of shape ",
                 engine::shape_str(x.shape()));
  return o;
}

/// The geometry of a spatial op on a blocked x (ops::is_blocked): CPU only.
kernels::BlockedPlane blocked_plane(const Tensor& x, int64_t ho, int64_t wo, const char* op) {
  Y9_CHECK_SHAPE(x.device().is_cpu(), op, ": a blocked x must be on the CPU, got ", x.str());
  return kernels::BlockedPlane{x.size(0), x.size(1), x.size(2), x.size(3), x.size(4), ho, wo};
}

/// Pooling of a blocked x through kBlockedPool2d; its geometry into *geometry when non-null.
Tensor blocked_pool(const Tensor& x, bool max, int64_t kernel, int64_t stride, int64_t padding, const char* op,
                    kernels::BlockedPlane* geometry = nullptr) {
  const int64_t ho = pool_out(x, x.size(2), kernel, stride, padding, op);
  const int64_t wo = pool_out(x, x.size(3), kernel, stride, padding, op);
  const kernels::BlockedPlane g = blocked_plane(x, ho, wo, op);
  if (geometry) *geometry = g;
  const Tensor xc = engine::contiguous_nograd(x);
  Tensor y = Tensor::empty({g.n, g.cb, ho, wo, g.block}, x.dtype(), x.device());
  auto k = engine::kernel(kernels::kBlockedPool2d, x.dtype(), x.device());
  if (y.numel() > 0) k.fn(k.ctx, x.dtype(), xc.data_ptr(), g, max, kernel, stride, padding, y.data_ptr());
  return y;
}

/// Records the autograd node `name` of a blocked spatial op y = f(x) of geometry g: dx (blocked,
/// [n, cb, h, w, block]) from the backward entry `key` of dy's device, called as
/// (ctx, dtype, dy, g, args..., dx).
template <typename Fn, typename... Args>
void record_blocked_backward(const char* name, const Tensor& x, const Tensor& y, const kernels::BlockedPlane& g,
                             const engine::KernelKey<Fn>& key, Args... args) {
  engine::autograd::record_fn(name, {x}, {y}, [g, &key, args...](const std::vector<Tensor>& gr) {
    if (!gr[0].defined()) return std::vector<Tensor>{Tensor()};
    Tensor dy = engine::contiguous_nograd(gr[0]);
    auto kb = engine::kernel(key, dy.dtype(), dy.device());
    Tensor dx = Tensor::empty({g.n, g.cb, g.h, g.w, g.block}, dy.dtype(), dy.device());
    if (dx.numel() > 0) kb.fn(kb.ctx, dy.dtype(), dy.data_ptr(), g, args..., dx.data_ptr());
    return std::vector<Tensor>{dx};
  });
}

/// op(x) for a blocked x that needs a gradient where the blocked entries have no backward (max
/// pooling: SPPELAN's and ADown's, on small maps): through the plain op and differentiable layout
/// conversions.
template <typename Op>
Tensor blocked_with_grad(const Tensor& x, Op op) {
  return to_blocked(op(from_blocked(x)), x.size(4));
}

}  // namespace

Tensor upsample_nearest(const Tensor& x, int64_t scale) {
  detail::check_defined(x, "upsample_nearest", "input");
  Y9_CHECK_SHAPE(scale >= 1, "upsample_nearest: scale must be >= 1, got ", scale, " for shape ",
                 engine::shape_str(x.shape()));
  if (is_blocked(x)) {
    const kernels::BlockedPlane g = blocked_plane(x, x.size(2) * scale, x.size(3) * scale, "upsample_nearest");
    const Tensor xc = engine::contiguous_nograd(x);
    Tensor y = Tensor::empty({g.n, g.cb, g.ho, g.wo, g.block}, x.dtype(), x.device());
    auto k = engine::kernel(kernels::kBlockedUpsampleNearest, x.dtype(), x.device());
    if (y.numel() > 0) k.fn(k.ctx, x.dtype(), xc.data_ptr(), g, scale, y.data_ptr());
    record_blocked_backward("UpsampleNearestBackward", x, y, g, kernels::kBlockedUpsampleNearestBackward, scale);
    return y;
  }
  check_nchw(x, "upsample_nearest");
  const Plane2d g = plane_of(x, x.size(2) * scale, x.size(3) * scale);
  auto k = engine::kernel(kernels::kUpsampleNearestForward, x.dtype(), x.device());
  Tensor y = Tensor::empty({g.n, g.c, g.ho, g.wo}, x.dtype(), x.device());
  if (y.numel() > 0) k.fn(k.ctx, x.dtype(), x.data_ptr(), g, scale, y.data_ptr());
  engine::autograd::record_fn("UpsampleNearestBackward", {x}, {y}, [g, scale](const std::vector<Tensor>& gr) {
    if (!gr[0].defined()) return std::vector<Tensor>{Tensor()};
    Tensor dy = gr[0].contiguous();
    auto kb = engine::kernel(kernels::kUpsampleNearestBackward, dy.dtype(), dy.device());
    Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w}, dy.dtype(), dy.device());
    if (dx.numel() > 0) kb.fn(kb.ctx, dy.dtype(), dy.data_ptr(), g, scale, dx.data_ptr());
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  if (x.defined() && is_blocked(x) && engine::autograd::needs_grad({x}))
    return blocked_with_grad(x, [&](const Tensor& p) { return max_pool2d(p, kernel, stride, padding); });
  if (x.defined() && is_blocked(x)) return blocked_pool(x, true, kernel, stride, padding, "max_pool2d");
  check_nchw(x, "max_pool2d");
  const int64_t ho = pool_out(x, x.size(2), kernel, stride, padding, "max_pool2d");
  const int64_t wo = pool_out(x, x.size(3), kernel, stride, padding, "max_pool2d");
  const Plane2d g = plane_of(x, ho, wo);
  auto k = engine::kernel(kernels::kMaxPool2dForward, x.dtype(), x.device());
  Tensor y = Tensor::empty({g.n, g.c, ho, wo}, x.dtype(), x.device());
  Tensor idx = Tensor::empty({g.n, g.c, ho, wo}, engine::DType::I64, x.device());
  if (y.numel() > 0) k.fn(k.ctx, x.dtype(), x.data_ptr(), g, kernel, stride, padding, y.data_ptr(), idx.data<int64_t>());
  engine::autograd::record_fn("MaxPool2dBackward", {x}, {y}, [g, idx, kernel, stride, padding](const std::vector<Tensor>& gr) {
    if (!gr[0].defined()) return std::vector<Tensor>{Tensor()};
    Tensor dy = gr[0].contiguous();
    auto kb = engine::kernel(kernels::kMaxPool2dBackward, dy.dtype(), dy.device());
    Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w}, dy.dtype(), dy.device());
    if (dx.numel() > 0)
      kb.fn(kb.ctx, dy.dtype(), dy.data_ptr(), idx.data<int64_t>(), g, kernel, stride, padding, dx.data_ptr());
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  if (x.defined() && is_blocked(x)) {
    kernels::BlockedPlane g;
    Tensor y = blocked_pool(x, false, kernel, stride, padding, "avg_pool2d", &g);
    record_blocked_backward("AvgPool2dBackward", x, y, g, kernels::kBlockedAvgPool2dBackward, kernel, stride, padding);
    return y;
  }
  check_nchw(x, "avg_pool2d");
  const int64_t ho = pool_out(x, x.size(2), kernel, stride, padding, "avg_pool2d");
  const int64_t wo = pool_out(x, x.size(3), kernel, stride, padding, "avg_pool2d");
  const Plane2d g = plane_of(x, ho, wo);
  auto k = engine::kernel(kernels::kAvgPool2dForward, x.dtype(), x.device());
  Tensor y = Tensor::empty({g.n, g.c, ho, wo}, x.dtype(), x.device());
  if (y.numel() > 0) k.fn(k.ctx, x.dtype(), x.data_ptr(), g, kernel, stride, padding, y.data_ptr());
  engine::autograd::record_fn("AvgPool2dBackward", {x}, {y}, [g, kernel, stride, padding](const std::vector<Tensor>& gr) {
    if (!gr[0].defined()) return std::vector<Tensor>{Tensor()};
    Tensor dy = gr[0].contiguous();
    auto kb = engine::kernel(kernels::kAvgPool2dBackward, dy.dtype(), dy.device());
    Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w}, dy.dtype(), dy.device());
    if (dx.numel() > 0) kb.fn(kb.ctx, dy.dtype(), dy.data_ptr(), g, kernel, stride, padding, dx.data_ptr());
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace ops
