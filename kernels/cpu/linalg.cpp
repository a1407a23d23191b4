// softmax/log_softmax and batched GEMM on the CPU. GEMM batches run one after another and
// OpenBLAS threads each product (YOLO's matmuls are few and small; batching them in OpenMP on
// top of a threaded BLAS would oversubscribe).
#include "kernels/common/linalg.h"
#include "kernels/cpu/dispatch.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace kernels::cpu {

namespace {

constexpr int64_t kInnerBlock = 256;

template <typename T>
void softmax_block(const T* x, T* y, int64_t n, int64_t inner, int64_t i0, int64_t i1, bool log) {
  const int64_t w = i1 - i0;
  std::vector<double> mx(static_cast<size_t>(w), -INFINITY), sum(static_cast<size_t>(w), 0.0);
  for (int64_t d = 0; d < n; ++d)
    for (int64_t i = 0; i < w; ++i) mx[i] = std::max(mx[i], static_cast<double>(x[d * inner + i0 + i]));
  for (int64_t d = 0; d < n; ++d)
    for (int64_t i = 0; i < w; ++i) sum[i] += std::exp(static_cast<double>(x[d * inner + i0 + i]) - mx[i]);
  for (int64_t i = 0; i < w; ++i) sum[i] = softmax_norm(mx[i], sum[i], log);
  for (int64_t d = 0; d < n; ++d)
    for (int64_t i = 0; i < w; ++i) {
      const double v = static_cast<double>(x[d * inner + i0 + i]);
      y[d * inner + i0 + i] = static_cast<T>(softmax_out(v, mx[i], sum[i], log));
    }
}

template <typename T>
void softmax_bwd_block(const T* y, const T* dy, T* dx, int64_t n, int64_t inner, int64_t i0, int64_t i1, bool log) {
  const int64_t w = i1 - i0;
  std::vector<double> s(static_cast<size_t>(w), 0.0);
  for (int64_t d = 0; d < n; ++d)
    for (int64_t i = 0; i < w; ++i) {
      const int64_t o = d * inner + i0 + i;
      s[i] += softmax_bwd_term(static_cast<double>(y[o]), static_cast<double>(dy[o]), log);
    }
  for (int64_t d = 0; d < n; ++d)
    for (int64_t i = 0; i < w; ++i) {
      const int64_t o = d * inner + i0 + i;
      const double yv = static_cast<double>(y[o]), g = static_cast<double>(dy[o]);
      dx[o] = static_cast<T>(softmax_bwd_out(yv, g, s[i], log));
    }
}

inline CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

void gemm(const float* a, bool ta, int64_t lda, const float* b, bool tb, int64_t ldb, float* c, int64_t m,
          int64_t n, int64_t k) {
  cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c, static_cast<int>(n));
}
void gemm(const double* a, bool ta, int64_t lda, const double* b, bool tb, int64_t ldb, double* c, int64_t m,
          int64_t n, int64_t k) {
  cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), 0.0, c, static_cast<int>(n));
}

}  // namespace

/// Softmax forward over the middle dim of [outer, n, inner]. Each task (an inner block of 256) does
/// its own work, so the split over threads leaves the bits alone; it pays from 4096 elements (the
/// DFL decode of a batch-1 detect, [1, 16, 4 x anchors], evaluates an exp per element in double).
template <typename T>
void softmax_forward_cpu(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t tasks = outer * blocks;
#pragma omp parallel for schedule(static) if (tasks > 1 && outer * n * inner > 4096)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / blocks, bl = t % blocks;
    const int64_t i0 = bl * kInnerBlock, i1 = std::min(inner, i0 + kInnerBlock);
    softmax_block(x + o * n * inner, y + o * n * inner, n, inner, i0, i1, log);
  }
}

template <typename T>
void softmax_backward_cpu(const T* y, const T* dy, T* dx, int64_t outer, int64_t n, int64_t inner, bool log) {
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t tasks = outer * blocks;
#pragma omp parallel for schedule(static) if (tasks > 1 && outer * n * inner > 32768)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / blocks, bl = t % blocks;
    const int64_t i0 = bl * kInnerBlock, i1 = std::min(inner, i0 + kInnerBlock);
    const int64_t base = o * n * inner;
    softmax_bwd_block(y + base, dy + base, dx + base, n, inner, i0, i1, log);
  }
}

template <typename T>
void matmul_forward_cpu(const GemmOperand& a, const GemmOperand& b, T* out, int64_t m, int64_t n, int64_t k) {
  int64_t batches = 1;
  for (int d = 0; d < a.batch.ndim; ++d) batches *= a.batch.sizes[d];
  const T* pa = static_cast<const T*>(a.ptr);
  const T* pb = static_cast<const T*>(b.ptr);
  for (int64_t i = 0; i < batches; ++i) {
    T* c = out + i * m * n;
    if (k == 0) {
      std::fill(c, c + m * n, T(0));
      continue;
    }
    gemm(pa + strided_offset(a.batch, i), a.trans, a.ld, pb + strided_offset(b.batch, i), b.trans, b.ld, c, m, n, k);
  }
}

namespace {

void softmax_fwd(engine::DeviceContext&, engine::DType dt, const void* x, void* y, int64_t outer, int64_t n,
                 int64_t inner, bool log) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    softmax_forward_cpu(static_cast<const T*>(x), static_cast<T*>(y), outer, n, inner, log);
  });
}

void softmax_bwd(engine::DeviceContext&, engine::DType dt, const void* y, const void* dy, void* dx, int64_t outer,
                 int64_t n, int64_t inner, bool log) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    softmax_backward_cpu(static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), outer, n, inner,
                         log);
  });
}

void matmul_fwd(engine::DeviceContext&, engine::DType dt, const GemmOperand& a, const GemmOperand& b, void* out,
                int64_t m, int64_t n, int64_t k) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    matmul_forward_cpu<T>(a, b, static_cast<T*>(out), m, n, k);
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kSoftmaxForward, &softmax_fwd, engine::kF32F64);
  b.add(kSoftmaxBackward, &softmax_bwd, engine::kF32F64);
  b.add(kMatmulForward, &matmul_fwd, engine::kF32F64);
}

}  // namespace kernels::cpu
