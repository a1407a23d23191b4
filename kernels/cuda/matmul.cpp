// The CUDA matrix-product entry (kernels/common/linalg.h matmul_forward) through cuBLAS
// (cublasGemmEx / cublasGemmStridedBatchedEx): F32, F64, F16 and BF16 operands with FP32
// accumulation for the halves (F64 in double). The row-major product C = A B is computed as the
// column-major C^T = B^T A^T, so no operand is copied. Batches whose offsets follow one stride
// (the common case) are one strided-batched call; other broadcast batch layouts take one call per
// batch (offsets are computed on the host from the layout, never read from the device).
//
// Under the CUDA-on-CPU emulator cuBLAS cannot run: the entry is served by the CPU backend's BLAS
// (kernels/cuda/cpu_fallback.h; F32 and F64 directly, F16 and BF16 in F32 on upcast copies,
// rounded back).
#include <cuda_runtime.h>

#include <vector>

#include "engine/backend.h"
#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/linalg.h"

#if defined(Y9_CUDA_EMULATOR)
#include "kernels/cuda/cpu_fallback.h"
#else
#include "kernels/cuda/libraries.h"
#endif

namespace kernels::cuda {

namespace {

#if defined(Y9_CUDA_EMULATOR)

/// Elements spanned by a (rows x cols) operand with its batch layout: the highest offset + 1.
size_t operand_span(const GemmOperand& o, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return 0;
  int64_t last = o.trans ? (cols - 1) * o.ld + (rows - 1) : (rows - 1) * o.ld + (cols - 1);
  for (int d = 0; d < o.batch.ndim; ++d) {
    if (o.batch.sizes[d] == 0) return 0;
    if (o.batch.strides[d] > 0) last += (o.batch.sizes[d] - 1) * o.batch.strides[d];
  }
  return size_t(last + 1);
}

// F16/BF16: the F32 BLAS product of upcast copies (same layouts), rounded back (cuBLAS's FP32
// accumulation, up to the summation order).
void matmul_forward(engine::DeviceContext& ctx, engine::DType dt, const GemmOperand& a, const GemmOperand& b,
                    void* out, int64_t m, int64_t n, int64_t k) {
  if (!fallback_upcasts(dt)) {
    run_on_cpu(ctx, kMatmulForward, dt, dt, a, b, out, m, n, k);
    return;
  }
  int64_t batches = 1;
  for (int d = 0; d < a.batch.ndim; ++d) batches *= a.batch.sizes[d];
  if (batches == 0 || m == 0 || n == 0) return;
  ctx.synchronize(engine::StreamKind::Compute);
  const std::vector<float> af = upcast_f32(a.ptr, operand_span(a, m, k), dt);
  const std::vector<float> bf = upcast_f32(b.ptr, operand_span(b, k, n), dt);
  GemmOperand a32 = a, b32 = b;
  a32.ptr = af.data();
  b32.ptr = bf.data();
  std::vector<float> of(size_t(batches * m * n));
  run_on_cpu(ctx, kMatmulForward, engine::DType::F32, engine::DType::F32, a32, b32, static_cast<void*>(of.data()), m,
             n, k);
  round_from_f32(of.data(), of.size(), dt, out);
}
constexpr engine::DTypeSet kMatmulDtypes = engine::kFloating;

#else

cudaDataType_t cuda_dtype(engine::DType dt) {
  switch (dt) {
    case engine::DType::F32: return CUDA_R_32F;
    case engine::DType::F64: return CUDA_R_64F;
    case engine::DType::F16: return CUDA_R_16F;
    case engine::DType::BF16: return CUDA_R_16BF;
    default:
      Y9_THROW(engine::ShapeError, "matmul: dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64, f16, bf16)");
  }
}

/// The single stride of a batch layout, or false when its offsets do not follow one stride.
bool single_stride(const StridedLayout& l, int64_t& stride) {
  stride = 0;
  int64_t expect = -1;  // stride of the next-outer dim for the run to stay one stride
  for (int d = l.ndim - 1; d >= 0; --d) {
    if (l.sizes[d] == 1) continue;
    if (expect < 0) {
      stride = l.strides[d];
    } else if (l.strides[d] != expect) {
      return false;
    }
    expect = l.strides[d] * l.sizes[d];
  }
  return true;
}

void matmul_forward(engine::DeviceContext& ctx, engine::DType dt, const GemmOperand& a, const GemmOperand& b,
                    void* out, int64_t m, int64_t n, int64_t k) {
  engine::CudaDeviceGuard g(ctx.device().index);
  int64_t batches = 1;
  for (int d = 0; d < a.batch.ndim; ++d) batches *= a.batch.sizes[d];
  if (batches == 0 || m == 0 || n == 0) return;
  const size_t es = engine::dtype_size(dt);
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  if (k == 0) {  // an empty sum: zeros (cuBLAS would leave C alone)
    CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(batches * m * n) * es, stream));
    return;
  }
  auto& lib = ctx.state<CudaLibraries>();
  const cudaDataType_t t = cuda_dtype(dt);
  const bool f64 = dt == engine::DType::F64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.f, zero_f = 0.f;
  const void* one = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  // Column-major C^T [n, m] = op(B)^T [n, k] x op(A)^T [k, m].
  const cublasOperation_t opb = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opa = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const char* pa = static_cast<const char*>(a.ptr);
  const char* pb = static_cast<const char*>(b.ptr);
  char* pc = static_cast<char*>(out);
  int64_t sa = 0, sb = 0;
  if (single_stride(a.batch, sa) && single_stride(b.batch, sb)) {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(lib.cublas(), opb, opa, int(n), int(m), int(k), one, pb, t, int(b.ld), sb,
                                            pa, t, int(a.ld), sa, zero, pc, t, int(n), m * n, int(batches), compute,
                                            CUBLAS_GEMM_DEFAULT));
    return;
  }
  for (int64_t i = 0; i < batches; ++i)
    CUBLAS_CHECK(cublasGemmEx(lib.cublas(), opb, opa, int(n), int(m), int(k), one,
                              pb + strided_offset(b.batch, i) * int64_t(es), t, int(b.ld),
                              pa + strided_offset(a.batch, i) * int64_t(es), t, int(a.ld), zero,
                              pc + i * m * n * int64_t(es), t, int(n), compute, CUBLAS_GEMM_DEFAULT));
}
constexpr engine::DTypeSet kMatmulDtypes = engine::kFloating;

#endif

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) { b.add(kMatmulForward, &matmul_forward, kMatmulDtypes); }

}  // namespace kernels::cuda
