// Dtype dispatch of the CPU entries: the float entries are registered for F32 and F64 only
// (engine::kF32F64), so the entry wrappers choose between the two instantiations.
#pragma once
#include "engine/dtype.h"

namespace kernels::cpu {

/// Calls f(float{}) for F32 and f(double{}) otherwise (the registry only lets F32/F64 through).
template <typename F>
decltype(auto) float_or_double(engine::DType dt, F&& f) {
  if (dt == engine::DType::F32) return f(float{});
  return f(double{});
}

}  // namespace kernels::cpu
