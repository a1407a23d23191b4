// The CPU iterator over N-d strided operands (the one elementwise framework of the CPU backend):
// rows of the innermost dim, threaded over rows, and over pieces of a row when there are fewer
// rows than threads (a contiguous tensor is one long row after merging).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common/strided.h"

namespace kernels::cpu {

/// Calls f(const int64_t* offsets, int64_t n, const int64_t* inner_strides) for every row (or
/// piece of a row) of the innermost dimension; offsets[k] is the element offset of operand k at
/// the start of the piece. `sizes` is the iteration shape; strides[k][d] the element stride of
/// operand k in dim d. Size-1 dims are dropped and dims contiguous for every operand merged.
/// Pieces run in parallel (OpenMP) when the total work exceeds `grain` elements; every element
/// is visited exactly once, so pointwise results do not depend on the thread count.
template <int N, typename F>
void nd_for_each_row(int ndim, const int64_t* sizes, const int64_t (*strides)[kMaxDims], F&& f,
                     int64_t grain = 32768) {
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
    for (int d = 0; d < ndim; ++d)
      if (sizes[d] == 0) return;
    f(off, 1, inner);
    return;
  }
  for (int d = 0; d < nd; ++d)
    if (sz[d] == 0) return;
  const int64_t inner_n = sz[nd - 1];
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = st[k][nd - 1];
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= sz[d];
  const bool par = rows * inner_n > grain;
  // Fewer rows than threads: cut each row into pieces of at least grain/4 elements.
  int64_t pieces = 1;
  if (par) {
    const int64_t threads = omp_get_max_threads();
    if (rows < threads) pieces = std::max<int64_t>(1, std::min<int64_t>((threads + rows - 1) / rows, inner_n / std::max<int64_t>(1, grain / 4)));
  }
  const int64_t piece_n = (inner_n + pieces - 1) / pieces;
#pragma omp parallel for schedule(static) if (par && rows * pieces > 1)
  for (int64_t w = 0; w < rows * pieces; ++w) {
    const int64_t r = w / pieces, p = w - r * pieces;
    const int64_t start = p * piece_n;
    const int64_t n = std::min(piece_n, inner_n - start);
    if (n <= 0) continue;
    int64_t off[N] = {};
    int64_t rem = r;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t q = rem / sz[d];
      int64_t i = rem - q * sz[d];
      rem = q;
      for (int k = 0; k < N; ++k) off[k] += i * st[k][d];
    }
    for (int k = 0; k < N; ++k) off[k] += start * inner[k];
    f(off, n, inner);
  }
}

/// Layout strides of N operands as nd_for_each_row takes them (layouts share sizes).
template <int N>
void layout_strides(int64_t (*st)[kMaxDims], const StridedLayout* const* ls) {
  for (int k = 0; k < N; ++k)
    for (int d = 0; d < ls[0]->ndim; ++d) st[k][d] = ls[k]->strides[d];
}

}  // namespace kernels::cpu
