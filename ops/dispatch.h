// Internal helpers of ops/*.cpp: argument checks shared by the ops. Dispatch itself is
// engine::kernel(key, dtype, device) (engine/backend.h); ops never branch on the device.
#pragma once
#include "engine/backend.h"
#include "engine/error.h"
#include "engine/layout.h"
#include "engine/tensor.h"

namespace ops::detail {

/// Throws ShapeError unless `t` is defined.
inline void check_defined(const engine::Tensor& t, const char* op, const char* what) {
  Y9_CHECK_SHAPE(t.defined(), op, ": ", what, " is an undefined tensor");
}

/// Throws ShapeError unless every defined tensor has `t0`'s dtype.
inline void check_same_dtype(const std::vector<engine::Tensor>& ts, const char* op) {
  const engine::Tensor* first = nullptr;
  for (const auto& t : ts) {
    if (!t.defined()) continue;
    if (!first) first = &t;
    Y9_CHECK_SHAPE(t.dtype() == first->dtype(), op, ": dtypes differ: ", first->str(), " and ", t.str());
  }
}

/// Whether two dtypes are a mix that the ops promote: different floating dtypes of which at least
/// one is F16 or BF16 (autocast activations meeting FP32 tensors, ops/autocast.h). F32 with F64
/// stays an error (the F64 reference path is never mixed on purpose).
inline bool promotes_mixed(engine::DType a, engine::DType b) {
  auto half = [](engine::DType t) { return t == engine::DType::F16 || t == engine::DType::BF16; };
  return a != b && engine::is_floating(a) && engine::is_floating(b) && (half(a) || half(b));
}

/// The common dtype of two floating dtypes (PyTorch type promotion): `a` when equal, F64 when
/// either is F64, else F32 (F32 with F16/BF16, and F16 with BF16).
inline engine::DType promote_floating(engine::DType a, engine::DType b) {
  if (a == b) return a;
  return a == engine::DType::F64 || b == engine::DType::F64 ? engine::DType::F64 : engine::DType::F32;
}

}  // namespace ops::detail
