// CPU twins of softmax / log_softmax over one dim and batched GEMM (OpenBLAS cblas_?gemm).
#pragma once
#include <cstdint>

#include "kernels/common/strided.h"

namespace kernels::cpu {

/// x, y contiguous viewed as [outer, n, inner]; softmax (or log_softmax when `log`) over n.
/// Max-subtracted, sums accumulated in double. Threaded over (outer, inner blocks).
template <typename T>
void softmax_forward_cpu(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool log);
/// From the forward output y: softmax dx = y * (dy - sum(dy*y)); log_softmax dx = dy - e^y * sum(dy).
template <typename T>
void softmax_backward_cpu(const T* y, const T* dy, T* dx, int64_t outer, int64_t n, int64_t inner, bool log);

/// One row-major matrix operand of a GEMM: element (i, j) at ptr[i*ld + j] (trans = false) or
/// ptr[j*ld + i] (trans = true), with batch offsets from `batch` (iterated over the broadcast
/// batch shape of the output; stride 0 on broadcast dims).
struct GemmOperand {
  const void* ptr = nullptr;
  bool trans = false;
  int64_t ld = 0;
  StridedLayout batch;
};

/// out[b] (contiguous [M, N], batch-major) = A[b] [M, K] x B[b] [K, N] for every batch index b
/// of the shared batch shape (A.batch.sizes). T = float (sgemm) or double (dgemm).
template <typename T>
void matmul_forward_cpu(const GemmOperand& a, const GemmOperand& b, T* out, int64_t m, int64_t n, int64_t k);

}  // namespace kernels::cpu
