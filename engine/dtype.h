// Element types of tensors and their sizes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace engine {

/// Element type. F16/BF16 are stored as uint16 bit patterns (see engine/half.h);
/// F64 exists for reference paths and finite-difference gradient checks on the CPU.
enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64, U8, Bool };

/// Size of one element in bytes.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::Bool: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

/// Short lower-case name: "f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool".
const char* dtype_name(DType t);
/// Safetensors name ("F32", "F16", "BF16", "I32", "I64", "U8", "F64", "BOOL"); throws on unknown.
const char* dtype_safetensors_name(DType t);
DType dtype_from_safetensors_name(const std::string& s);

/// C++ type -> DType.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };

}  // namespace engine
