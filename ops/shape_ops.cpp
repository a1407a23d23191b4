// Shape ops: concat (kernel copy, backward splits the gradient into contiguous pieces), and
// split/chunk, whose outputs are narrow() views (autograd flows through the view nodes).
#include <string>

#include "engine/autograd.h"
#include "kernels/common/concat.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace ops {

using engine::Shape;
using engine::Tensor;

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  Y9_CHECK_SHAPE(!xs.empty(), "concat: empty list of tensors");
  for (const auto& x : xs) detail::check_defined(x, "concat", "an input");
  {
    // Mixed floating dtypes with F16/BF16 pieces (autocast, detail::promotes_mixed): every piece
    // promoted to the common dtype through differentiable casts. Other mixes are reported below.
    engine::DType common = xs[0].dtype();
    bool promote = false, bad = false;
    for (const auto& x : xs) {
      if (x.dtype() == common) continue;
      if (!detail::promotes_mixed(common, x.dtype()) && !detail::promotes_mixed(xs[0].dtype(), x.dtype())) bad = true;
      common = detail::promote_floating(common, x.dtype());
      promote = true;
    }
    if (promote && !bad) {
      std::vector<Tensor> cast;
      for (const auto& x : xs) cast.push_back(x.to(common));
      return concat(cast, dim);
    }
  }
  const Tensor& x0 = xs[0];
  Y9_CHECK_SHAPE(x0.dim() > 0, "concat: 0-d tensor ", x0.str());
  const int64_t d = x0.wrap_dim(dim);
  Shape out_shape = x0.shape();
  out_shape[d] = 0;
  std::vector<int64_t> sizes;
  for (const auto& x : xs) {
    bool ok = x.dim() == x0.dim() && x.dtype() == x0.dtype() && x.device() == x0.device();
    for (int64_t i = 0; ok && i < x.dim(); ++i) ok = i == d || x.size(i) == x0.size(i);
    Y9_CHECK_SHAPE(ok, "concat: along dim ", d, " tensors ", x0.str(), " and ", x.str(),
                   " differ in rank, another dim, dtype or device");
    sizes.push_back(x.size(d));
    out_shape[d] += x.size(d);
  }
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= out_shape[i];
  for (int64_t i = d + 1; i < static_cast<int64_t>(out_shape.size()); ++i) inner *= out_shape[i];
  auto k = engine::kernel(kernels::kConcatForward, x0.dtype(), x0.device());
  Tensor out = Tensor::empty(out_shape, x0.dtype(), x0.device());
  {
    std::vector<Tensor> cs;
    std::vector<const void*> ptrs;
    for (const auto& x : xs) cs.push_back(engine::contiguous_nograd(x));
    for (const auto& c : cs) ptrs.push_back(c.data_ptr());
    k.fn(k.ctx, x0.dtype(), out.data_ptr(), ptrs.data(), sizes.data(), static_cast<int>(xs.size()), outer, inner);
  }
  std::vector<bool> need;
  std::vector<Shape> shapes;
  for (const auto& x : xs) {
    need.push_back(x.requires_grad());
    shapes.push_back(x.shape());
  }
  engine::autograd::record_fn("ConcatBackward", xs, {out},
                              [need, shapes, sizes, outer, inner](const std::vector<Tensor>& g) {
                                std::vector<Tensor> r(shapes.size());
                                if (!g[0].defined()) return r;
                                Tensor dy = g[0].contiguous();
                                for (size_t k = 0; k < shapes.size(); ++k)
                                  if (need[k]) r[k] = Tensor::empty(shapes[k], dy.dtype(), dy.device());
                                auto kb = engine::kernel(kernels::kConcatBackward, dy.dtype(), dy.device());
                                std::vector<void*> ptrs;
                                for (auto& t : r) ptrs.push_back(t.defined() ? t.data_ptr() : nullptr);
                                kb.fn(kb.ctx, dy.dtype(), dy.data_ptr(), ptrs.data(), sizes.data(),
                                      static_cast<int>(r.size()), outer, inner);
                                return r;
                              });
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  detail::check_defined(x, "split", "input");
  Y9_CHECK_SHAPE(x.dim() > 0, "split: 0-d tensor ", x.str());
  const int64_t d = x.wrap_dim(dim);
  int64_t total = 0;
  std::string list = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    list += (i ? ", " : "") + std::to_string(sizes[i]);
    total += sizes[i];
  }
  list += "]";
  bool nonneg = true;
  for (int64_t s : sizes) nonneg = nonneg && s >= 0;
  Y9_CHECK_SHAPE(nonneg && total == x.size(d), "split: sizes ", list, " do not sum to dim ", d, " of shape ",
                 engine::shape_str(x.shape()));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  detail::check_defined(x, "chunk", "input");
  Y9_CHECK_SHAPE(chunks > 0, "chunk: chunks must be positive, got ", chunks, " for shape ",
                 engine::shape_str(x.shape()));
  Y9_CHECK_SHAPE(x.dim() > 0, "chunk: 0-d tensor ", x.str());
  const int64_t d = x.wrap_dim(dim);
  const int64_t n = x.size(d);
  // PyTorch: each chunk has ceil(n / chunks) elements, the last one the remainder (may give
  // fewer than `chunks` pieces).
  const int64_t step = (n + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  if (step == 0) {
    sizes.push_back(0);
  } else {
    for (int64_t s = 0; s < n; s += step) sizes.push_back(s + step <= n ? step : n - s);
  }
  return split(x, sizes, d);
}

}  // namespace ops
