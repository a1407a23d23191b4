// CPU iteration over N-d strided operands: rows of the innermost dim, threaded over rows.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/common/strided.h"

namespace kernels::cpu {

/// Calls f(const int64_t* offsets, int64_t n, const int64_t* inner_strides) for every row of
/// the innermost dimension; offsets[k] is the element offset of operand k at the row start.
/// `sizes` is the iteration shape; strides[k][d] the element stride of operand k in dim d.
/// Rows run in parallel (OpenMP) when the total work exceeds `grain` elements.
template <int N, typename F>
void nd_for_each_row(int ndim, const int64_t* sizes, const int64_t (*strides)[kMaxDims], F&& f,
                     int64_t grain = 32768) {
  // Drop size-1 dims and merge dims that are contiguous for every operand.
  int64_t sz[kMaxDims];
  int64_t st[N][kMaxDims];
  int nd = 0;
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] == 1) continue;
    if (nd > 0) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && (st[k][nd - 1] == strides[k][d] * sizes[d]);
      if (merge) {
        sz[nd - 1] *= sizes[d];
        for (int k = 0; k < N; ++k) st[k][nd - 1] = strides[k][d];
        continue;
      }
    }
    sz[nd] = sizes[d];
    for (int k = 0; k < N; ++k) st[k][nd] = strides[k][d];
    ++nd;
  }
  if (nd == 0) {
    int64_t off[N] = {};
    int64_t inner[N] = {};
    for (int k = 0; k < N; ++k) inner[k] = 1;
    for (int d = 0; d < ndim; ++d) if (sizes[d] == 0) return;
    f(off, 1, inner);
    return;
  }
  for (int d = 0; d < nd; ++d) if (sz[d] == 0) return;
  const int64_t inner_n = sz[nd - 1];
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = st[k][nd - 1];
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= sz[d];
  const bool par = rows > 1 && rows * inner_n > grain;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off[N] = {};
    int64_t rem = r;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t q = rem / sz[d];
      int64_t i = rem - q * sz[d];
      rem = q;
      for (int k = 0; k < N; ++k) off[k] += i * st[k][d];
    }
    f(off, inner_n, inner);
  }
}

}  // namespace kernels::cpu
