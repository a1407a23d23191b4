// CPU row reductions (threaded over rows; double accumulation for a fixed, accurate order).
#include "kernels/cpu/reduce.h"

namespace kernels::cpu {

template <typename T>
void sum_rows_cpu(const T* in, T* out, int64_t rows, int64_t n, double scale) {
#pragma omp parallel for schedule(static) if (rows * n > 32768 && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* p = in + r * n;
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(p[i]);
    out[r] = static_cast<T>(acc * scale);
  }
}

template void sum_rows_cpu<float>(const float*, float*, int64_t, int64_t, double);
template void sum_rows_cpu<double>(const double*, double*, int64_t, int64_t, double);

}  // namespace kernels::cpu
