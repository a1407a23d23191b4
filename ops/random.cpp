// engine::uniform_ / normal_ (declared in engine/rng.h): dispatch of the Philox fills by device.
#include "engine/autograd.h"
#include "engine/rng.h"
#include "kernels/common/rng.h"
#include "kernels/cpu/rng.h"

#if defined(Y9_WITH_CUDA)
#include "engine/cuda_runtime.h"
#include "kernels/cuda/rng.h"
#endif

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
  if (t.device().is_cpu()) {
    if (dist == Dist::Uniform)
      kernels::cpu::uniform_fill_cpu(f.data<float>(), n, gen.seed(), gen.stream_id(), offset, float(a), float(b));
    else
      kernels::cpu::normal_fill_cpu(f.data<float>(), n, gen.seed(), gen.stream_id(), offset, float(a), float(b));
  } else {
#if defined(Y9_WITH_CUDA)
    auto stream = kernels::cuda::current_stream(t.device().index);
    if (dist == Dist::Uniform)
      kernels::cuda::uniform_fill_cuda(f.data<float>(), n, gen.seed(), gen.stream_id(), offset, float(a), float(b), stream);
    else
      kernels::cuda::normal_fill_cuda(f.data<float>(), n, gen.seed(), gen.stream_id(), offset, float(a), float(b), stream);
#endif
  }
  if (!f.is_same(t)) {
    autograd::NoGradGuard ng;
    t.copy_(f);
  }
}
}  // namespace

float Generator::next_uniform() {
  uint64_t off = reserve(4);
  return kernels::philox_uniform_elem(seed_, stream_, off, 0, 0.0f, 1.0f);
}

void uniform_(Tensor& t, Generator& gen, double lo, double hi) { fill_random(t, gen, Dist::Uniform, lo, hi, "uniform_"); }
void normal_(Tensor& t, Generator& gen, double mean, double std) { fill_random(t, gen, Dist::Normal, mean, std, "normal_"); }

}  // namespace engine
