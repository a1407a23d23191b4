// CPU row reductions (threaded over rows; double accumulation for a fixed, accurate order): the
// sum_rows core entry.
#include "engine/core_kernels.h"

namespace kernels::cpu {

namespace {

template <typename T>
void sum_rows_typed(const T* in, T* out, int64_t rows, int64_t n, double scale) {
#pragma omp parallel for schedule(static) if (rows * n > 32768 && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = in + r * n;
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(p[i]);
    out[r] = static_cast<T>(acc * scale);
  }
}

void sum_rows(engine::DeviceContext&, const void* in, void* out, engine::DType dt, int64_t rows, int64_t n,
              double scale) {
  if (dt == engine::DType::F32)
    sum_rows_typed(static_cast<const float*>(in), static_cast<float*>(out), rows, n, scale);
  else
    sum_rows_typed(static_cast<const double*>(in), static_cast<double*>(out), rows, n, scale);
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) { b.add(engine::kSumRows, &sum_rows, engine::kF32F64); }

}  // namespace kernels::cpu
