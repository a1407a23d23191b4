// Kernel entries of batched matrix products (BLAS GEMM on the CPU, cuBLAS on CUDA) and of
// softmax / log_softmax over one dim.
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/hd.h"
#include "kernels/common/elementwise.h"
#include "kernels/common/strided.h"

namespace kernels {

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
/// of the shared batch shape (a.batch.sizes).
using MatmulForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const GemmOperand& a,
                                 const GemmOperand& b, void* out, int64_t m, int64_t n, int64_t k);
inline engine::KernelKey<MatmulForwardFn> kMatmulForward{"matmul_forward"};

/// x, y contiguous viewed as [outer, n, inner]; softmax (or log_softmax when `log`) over n,
/// max-subtracted (CPU: sums in double; CUDA: in float for F32/F16/BF16, double for F64).
using SoftmaxForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* x, void* y,
                                  int64_t outer, int64_t n, int64_t inner, bool log);
inline engine::KernelKey<SoftmaxForwardFn> kSoftmaxForward{"softmax_forward"};
/// From the forward output y: softmax dx = y * (dy - sum(dy*y)); log_softmax dx = dy - e^y * sum(dy).
using SoftmaxBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* y, const void* dy,
                                   void* dx, int64_t outer, int64_t n, int64_t inner, bool log);
inline engine::KernelKey<SoftmaxBackwardFn> kSoftmaxBackward{"softmax_backward"};

// --- softmax element math shared by the CPU twin (kernels/cpu/linalg.cpp, C = double) and the
// CUDA kernels (kernels/cuda/softmax.cu, C = float for F32/F16/BF16, double for F64) -------------

/// The per-slice normaliser from the slice maximum mx and sum(exp(x - mx)): log(sum) + mx for
/// log_softmax, 1 / sum for softmax.
template <typename C>
Y9_HD C softmax_norm(C mx, C sum, bool log) {
  return log ? mx + k_log(sum) : C(1) / sum;
}

/// One output element from its input v, the slice maximum mx and softmax_norm: v - norm for
/// log_softmax, exp(v - mx) * norm for softmax.
template <typename C>
Y9_HD C softmax_out(C v, C mx, C norm, bool log) {
  return log ? v - norm : k_exp(v - mx) * norm;
}

/// One term of the backward slice sum: dy for log_softmax, dy * y for softmax.
template <typename C>
Y9_HD C softmax_bwd_term(C y, C dy, bool log) {
  return log ? dy : dy * y;
}

/// One input gradient from y, dy and the slice sum s of softmax_bwd_term: dy - exp(y) * s for
/// log_softmax, y * (dy - s) for softmax.
template <typename C>
Y9_HD C softmax_bwd_out(C y, C dy, C s, bool log) {
  return log ? dy - k_exp(y) * s : y * (dy - s);
}

}  // namespace kernels
