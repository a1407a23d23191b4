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

/// The common dtype of two floating dtypes (PyTorch type promotion): `a` when equal, F64 when
/// either is F64, else F32 (F32 with F16/BF16, and F16 with BF16). Used by the ops that accept
/// mixed floating inputs (binary elementwise ops, concat), e.g. autocast F16 activations meeting
/// FP32 tensors (ops/autocast.h).
inline engine::DType promote_floating(engine::DType a, engine::DType b) {
  if (a == b) return a;
  return a == engine::DType::F64 || b == engine::DType::F64 ? engine::DType::F64 : engine::DType::F32;
}

}  // namespace ops::detail
