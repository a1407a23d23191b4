// The autocast switch (ops/autocast.h): thread-local state, the RAII guard, and the operand cast
// used by conv2d and matmul.
#include "ops/autocast.h"

#include "engine/backend.h"
#include "engine/error.h"
#include "kernels/common/conv.h"

namespace ops {

namespace {

struct AutocastState {
  bool enabled = false;
  engine::DType dtype = engine::DType::F32;
};
thread_local AutocastState t_autocast;

}  // namespace

AutocastGuard::AutocastGuard(engine::DType dt, bool enabled)
    : prev_enabled_(t_autocast.enabled), prev_dtype_(t_autocast.dtype) {
  if (enabled)
    Y9_CHECK_T(engine::ConfigError, dt == engine::DType::F16 || dt == engine::DType::BF16, "autocast: dtype must be f16 or bf16, got ",
                    engine::dtype_name(dt));
  t_autocast.enabled = enabled;
  if (enabled) t_autocast.dtype = dt;
}

AutocastGuard::~AutocastGuard() {
  t_autocast.enabled = prev_enabled_;
  t_autocast.dtype = prev_dtype_;
}

bool autocast_enabled() { return t_autocast.enabled; }

engine::DType autocast_dtype() { return t_autocast.enabled ? t_autocast.dtype : engine::DType::F32; }

bool cpu_bf16_convolutions(engine::Device device) {
  if (!device.is_cpu()) return false;
  const engine::Backend& b = engine::backend(device.type);
  if (!b.supports(kernels::kConv2dBf16Math, engine::DType::F32)) return false;
  auto k = engine::kernel(kernels::kConv2dBf16Math, engine::DType::F32, device);
  return k.fn(k.ctx);
}

bool cpu_bf16_conv(const engine::Tensor& x) {
  return t_autocast.enabled && t_autocast.dtype == engine::DType::BF16 && x.defined() && x.device().is_cpu() &&
         x.dtype() == engine::DType::F32 && cpu_bf16_convolutions(x.device());
}

engine::Tensor autocast_operand(const engine::Tensor& t) {
  if (!t_autocast.enabled || !t.defined() || !t.device().is_cuda()) return t;
  const engine::DType d = t.dtype();
  if (d == t_autocast.dtype) return t;
  if (d != engine::DType::F32 && d != engine::DType::F16 && d != engine::DType::BF16) return t;
  return t.to(t_autocast.dtype);
}

}  // namespace ops
