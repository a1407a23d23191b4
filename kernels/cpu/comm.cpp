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

template <typename Store>
void compress_to(const float* __restrict__ s, uint16_t* __restrict__ d, int64_t n, float k, Store store) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] = store(s[i] * k);
}

template <typename Load>
void decompress_from(const uint16_t* __restrict__ s, float* __restrict__ d, int64_t n, float k, Load load) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] = load(s[i]) * k;
}

void compress_entry(engine::DeviceContext&, DType wire, const float* src, void* dst, int64_t n, double scale) {
  if (n <= 0) return;
  const float k = static_cast<float>(scale);
  if (wire == DType::F32) {
    float* d = static_cast<float*>(dst);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) d[i] = src[i] * k;
  } else if (wire == DType::F16) {
    compress_to(src, static_cast<uint16_t*>(dst), n, k, [](float v) { return engine::f32_to_f16(v); });
  } else {
    compress_to(src, static_cast<uint16_t*>(dst), n, k, [](float v) { return engine::f32_to_bf16(v); });
  }
}

void decompress_entry(engine::DeviceContext&, DType wire, const void* src, float* dst, int64_t n, double scale) {
  if (n <= 0) return;
  const float k = static_cast<float>(scale);
  if (wire == DType::F32) {
    const float* s = static_cast<const float*>(src);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i] * k;
  } else if (wire == DType::F16) {
    decompress_from(static_cast<const uint16_t*>(src), dst, n, k, [](uint16_t v) { return engine::f16_to_f32(v); });
  } else {
    decompress_from(static_cast<const uint16_t*>(src), dst, n, k, [](uint16_t v) { return engine::bf16_to_f32(v); });
  }
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kCommAccumulate, &accumulate_entry, engine::kFloating);
  b.add(kCommScale, &scale_entry, engine::kFloating);
  b.add(kCommCompress, &compress_entry, engine::DTypeSet{DType::F32, DType::F16, DType::BF16});
  b.add(kCommDecompress, &decompress_entry, engine::DTypeSet{DType::F32, DType::F16, DType::BF16});
}

}  // namespace kernels::cpu
