// CPU entries of the collective kernels (kernels/common/comm.h): dense, vectorisable loops,
// threaded above 256 Ki elements (the ring's slices are usually below that and run on the
// communicating thread).
#include "engine/half.h"
#include "kernels/common/comm.h"

namespace kernels::cpu {

namespace {

using engine::DType;

constexpr int64_t kParallelMin = int64_t(1) << 18;

template <typename T>
void accumulate_native(T* __restrict__ d, const T* __restrict__ s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void accumulate_16(uint16_t* __restrict__ d, const uint16_t* __restrict__ s, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] = Store(Load(d[i]) + Load(s[i]));
}

template <typename T>
void scale_native(T* __restrict__ d, int64_t n, T s) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] *= s;
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void scale_16(uint16_t* __restrict__ d, int64_t n, float s) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] = Store(Load(d[i]) * s);
}

void accumulate_entry(engine::DeviceContext&, DType dt, void* dst, const void* src, int64_t n) {
  if (n <= 0) return;
  switch (dt) {
    case DType::F32: accumulate_native(static_cast<float*>(dst), static_cast<const float*>(src), n); break;
    case DType::F64: accumulate_native(static_cast<double*>(dst), static_cast<const double*>(src), n); break;
    case DType::F16:
      accumulate_16<engine::f16_to_f32, engine::f32_to_f16>(static_cast<uint16_t*>(dst),
                                                            static_cast<const uint16_t*>(src), n);
      break;
    default:
      accumulate_16<engine::bf16_to_f32, engine::f32_to_bf16>(static_cast<uint16_t*>(dst),
                                                              static_cast<const uint16_t*>(src), n);
  }
}

void scale_entry(engine::DeviceContext&, DType dt, void* data, int64_t n, double s) {
  if (n <= 0) return;
  switch (dt) {
    case DType::F32: scale_native(static_cast<float*>(data), n, static_cast<float>(s)); break;
    case DType::F64: scale_native(static_cast<double*>(data), n, s); break;
    case DType::F16:
      scale_16<engine::f16_to_f32, engine::f32_to_f16>(static_cast<uint16_t*>(data), n, static_cast<float>(s));
      break;
    default:
      scale_16<engine::bf16_to_f32, engine::f32_to_bf16>(static_cast<uint16_t*>(data), n, static_cast<float>(s));
  }
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kCommAccumulate, &accumulate_entry, engine::kFloating);
  b.add(kCommScale, &scale_entry, engine::kFloating);
}

}  // namespace kernels::cpu
