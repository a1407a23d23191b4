// Test payloads of the all-reduce tests (allreduce_dist_test, tcp_comm_test): small integers per
// rank and element, so that every partial sum is exact in F16 and BF16 too (|value| <= 8, so a
// sum over up to 4 ranks stays within 32), encoded to and decoded from a dtype's bytes.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/dtype.h"
#include "engine/half.h"

namespace payload_test {

/// The value rank `rank` contributes at element `i`: an integer in [-8, 8].
inline double value(int rank, int64_t i) { return static_cast<double>((i * 7 + rank * 3 + 1) % 17) - 8.0; }

/// `v` as `dt` bytes (F32, F64, F16 or BF16; the integers above are exact in each).
inline std::vector<uint8_t> encode(const std::vector<double>& v, engine::DType dt) {
  std::vector<uint8_t> out(v.size() * engine::dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == engine::DType::F32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(&out[i * 4], &f, 4);
    } else if (dt == engine::DType::F64) {
      std::memcpy(&out[i * 8], &v[i], 8);
    } else {
      const uint16_t h = dt == engine::DType::F16 ? engine::f32_to_f16(static_cast<float>(v[i]))
                                                  : engine::f32_to_bf16(static_cast<float>(v[i]));
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

/// Element `i` of `b` read as `dt`.
inline double decode(const std::vector<uint8_t>& b, engine::DType dt, size_t i) {
  if (dt == engine::DType::F32) {
    float f;
    std::memcpy(&f, &b[i * 4], 4);
    return f;
  }
  if (dt == engine::DType::F64) {
    double d;
    std::memcpy(&d, &b[i * 8], 8);
    return d;
  }
  uint16_t h;
  std::memcpy(&h, &b[i * 2], 2);
  return dt == engine::DType::F16 ? engine::f16_to_f32(h) : engine::bf16_to_f32(h);
}

}  // namespace payload_test
