// CUDA row sums: a warp per row for short rows, a block per row for long rows; both reduce in a
// fixed order (strided per-thread partials, then a shuffle tree), so results are bitwise
// reproducible. TODO(lead): a two-pass split for few very long rows (rows=1, n=1e7).
#include "engine/core_kernels.h"

#include <cuda_runtime.h>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowBlock = 512;          // threads per block in the block-per-row kernel
constexpr int kWarpsPerBlock = kBlock / kWarp;
constexpr int64_t kWarpRowMax = 1024;   // rows up to this length use a warp each

template <typename C>
__device__ __forceinline__ C warp_sum(C v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__global__ void sum_rows_warp_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows, int64_t n,
                                     typename Scalar<T>::C scale) {
  using S = Scalar<T>;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps_total = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarp; r < rows; r += warps_total) {
    const T* row = in + r * n;
    typename S::C acc = 0;
    for (int64_t i = lane; i < n; i += kWarp) acc += S::load(row[i]);
    acc = warp_sum(acc);
    if (lane == 0) out[r] = S::store(acc * scale);
  }
}

template <typename T>
__global__ void sum_rows_block_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows, int64_t n,
                                      typename Scalar<T>::C scale) {
  using S = Scalar<T>;
  using C = typename S::C;
  __shared__ C partial[kRowBlock / kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = in + r * n;
    C acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += S::load(row[i]);
    acc = warp_sum(acc);
    if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = acc;
    __syncthreads();
    if (threadIdx.x < kWarp) {
      C v = threadIdx.x < blockDim.x / kWarp ? partial[threadIdx.x] : C(0);
      v = warp_sum(v);
      if (threadIdx.x == 0) out[r] = S::store(v * scale);
    }
    __syncthreads();  // partial[] is reused by the next row
  }
}

}  // namespace

void sum_rows_cuda(const void* in, void* out, engine::DType dtype, int64_t rows, int64_t n, double scale,
                   cudaStream_t stream) {
  bool ok = dispatch_float(dtype, [&]<typename T>() {
    using C = typename Scalar<T>::C;
    if (rows == 0) return;
    if (n <= kWarpRowMax) {
      Y9_LAUNCH(sum_rows_warp_kernel<T>, grid_for(rows * kWarp), kBlock, 0, stream, static_cast<const T*>(in), static_cast<T*>(out), rows, n, static_cast<C>(scale));
    } else {
      int64_t g = rows < 65535LL * 16 ? rows : 65535LL * 16;
      Y9_LAUNCH(sum_rows_block_kernel<T>, static_cast<unsigned>(g), kRowBlock, 0, stream,
          static_cast<const T*>(in), static_cast<T*>(out), rows, n, static_cast<C>(scale));
    }
  });
  Y9_CHECK_SHAPE(ok, "sum: dtype ", engine::dtype_name(dtype), " not supported on cuda (f32, f64, f16, bf16)");
}

namespace {
void sum_rows_entry(engine::DeviceContext& ctx, const void* in, void* out, engine::DType dt, int64_t rows, int64_t n,
                    double scale) {
  sum_rows_cuda(in, out, dt, rows, n, scale, static_cast<cudaStream_t>(ctx.stream()));
}
}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) { b.add(engine::kSumRows, &sum_rows_entry, engine::kFloating); }

}  // namespace kernels::cuda
