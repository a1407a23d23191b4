// engine::uniform_ / normal_ (engine/rng.h): Philox fills through the backend of the tensor's
// device (uniform_fill / normal_fill entries), so CPU and CUDA draw the same numbers.
#include "engine/rng.h"

#include "engine/autograd.h"
#include "engine/core_kernels.h"
#include "engine/philox.h"

namespace engine {

namespace {
enum class Dist { Uniform, Normal };

void fill_random(Tensor& t, Generator& gen, Dist dist, double a, double b, const char* op) {
  Y9_CHECK_SHAPE(is_floating(t.dtype()), op, ": needs a floating tensor, got ", t.str());
  Y9_CHECK_SHAPE(t.is_contiguous(), op, ": needs a contiguous tensor, got strides ", shape_str(t.strides()));
  int64_t n = t.numel();
  uint64_t offset = gen.reserve(static_cast<uint64_t>(dist == Dist::Normal ? n + (n & 1) : n));
  // Draw in f32 (the precision both backends share), then convert into the tensor's dtype.
  Tensor f = t.dtype() == DType::F32 ? t : Tensor::empty(t.shape(), DType::F32, t.device());
  if (dist == Dist::Uniform) {
    auto k = kernel(kUniformFill, DType::F32, t.device());
    k.fn(k.ctx, f.data<float>(), n, gen.seed(), gen.stream_id(), offset, float(a), float(b));
  } else {
    auto k = kernel(kNormalFill, DType::F32, t.device());
    k.fn(k.ctx, f.data<float>(), n, gen.seed(), gen.stream_id(), offset, float(a), float(b));
  }
  if (!f.is_same(t)) {
    autograd::NoGradGuard ng;
    t.copy_(f);
  }
}
}  // namespace

float Generator::next_uniform() {
  uint64_t off = reserve(4);
  return uint_to_unit_float(philox_draw(seed_, stream_, off, 0));
}

void uniform_(Tensor& t, Generator& gen, double lo, double hi) { fill_random(t, gen, Dist::Uniform, lo, hi, "uniform_"); }
void normal_(Tensor& t, Generator& gen, double mean, double std) { fill_random(t, gen, Dist::Normal, mean, std, "normal_"); }

}  // namespace engine
