// CPU row reductions.
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// out[r] = scale * sum_{i<n} in[r*n + i] for r < rows (contiguous input), accumulated in double.
template <typename T>
void sum_rows_cpu(const T* in, T* out, int64_t rows, int64_t n, double scale);

}  // namespace kernels::cpu
