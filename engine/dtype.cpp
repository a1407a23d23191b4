// DType names.
#include "engine/dtype.h"

#include "engine/error.h"

namespace engine {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::Bool: return "bool";
  }
  return "?";
}

const char* dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::Bool: return "BOOL";
  }
  Y9_THROW(Error, "unknown dtype");
}

DType dtype_from_safetensors_name(const std::string& s) {
  if (s == "F32") return DType::F32;
  if (s == "F64") return DType::F64;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  if (s == "I32") return DType::I32;
  if (s == "I64") return DType::I64;
  if (s == "U8") return DType::U8;
  if (s == "BOOL") return DType::Bool;
  Y9_THROW(Error, "safetensors: unsupported dtype '", s, "'");
}

}  // namespace engine
