// Element load/store with dtype conversion through double, shared by the CPU copy twin
// (kernels/cpu/copy.cpp) and the CUDA copy kernels (kernels/cuda/copy.cu), so both convert
// identically: floats round to nearest even (engine/half.h), integers truncate toward zero,
// Bool stores v != 0. Exact for every dtype except |i64| > 2^53.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/half.h"
#include "engine/hd.h"

namespace kernels {

/// Element i of `p` (dtype t) as double.
Y9_HD double load_any(const void* p, engine::DType t, int64_t i) {
  using engine::DType;
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::F16: return engine::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::BF16: return engine::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
    case DType::Bool: return static_cast<const uint8_t*>(p)[i] ? 1.0 : 0.0;
  }
  return 0;
}

/// Stores v converted to dtype t at element i of `p`.
Y9_HD void store_any(void* p, engine::DType t, int64_t i, double v) {
  using engine::DType;
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = engine::f32_to_f16(static_cast<float>(v)); break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = engine::f32_to_bf16(static_cast<float>(v)); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::Bool: static_cast<uint8_t*>(p)[i] = v != 0.0; break;
  }
}

}  // namespace kernels
