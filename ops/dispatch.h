// Internal helpers of ops/*.cpp: float-dtype dispatch and the standard "not on CUDA yet" error.
#pragma once
#include "engine/error.h"
#include "engine/tensor.h"

namespace ops::detail {

/// Calls f(float{}) or f(double{}) by `t`'s dtype; throws ShapeError naming `op` otherwise.
template <typename F>
decltype(auto) dispatch_float(const engine::Tensor& t, const char* op, F&& f) {
  if (t.dtype() == engine::DType::F32) return f(float{});
  Y9_CHECK_SHAPE(t.dtype() == engine::DType::F64, op, ": dtype must be f32 or f64 on the CPU, got ", t.str());
  return f(double{});
}

/// Throws ShapeError unless `t` is defined.
inline void check_defined(const engine::Tensor& t, const char* op, const char* what) {
  Y9_CHECK_SHAPE(t.defined(), op, ": ", what, " is an undefined tensor");
}

}  // namespace ops::detail
