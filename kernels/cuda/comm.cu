// CUDA entries of the collective kernels (kernels/common/comm.h): grid-stride loops on the
// context's Communication stream, F16/BF16 loaded to float, added or scaled, rounded once.
#include <cuda_runtime.h>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/comm.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

namespace {

using engine::DType;

template <typename T>
__global__ void accumulate_kernel(T* __restrict__ d, const T* __restrict__ s, int64_t n) {
  using S = Scalar<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = S::store(S::load(d[i]) + S::load(s[i]));
}

template <typename T>
__global__ void scale_kernel(T* __restrict__ d, int64_t n, typename Scalar<T>::C k) {
  using S = Scalar<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = S::store(S::load(d[i]) * k);
}

cudaStream_t comm_stream(engine::DeviceContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream(engine::StreamKind::Communication));
}

void accumulate_entry(engine::DeviceContext& ctx, DType dt, void* dst, const void* src, int64_t n) {
  if (n <= 0) return;
  cudaStream_t st = comm_stream(ctx);
  const bool ok = dispatch_float(dt, [&]<typename T>() {
    Y9_LAUNCH(accumulate_kernel<T>, grid_for(n), kBlock, 0, st, static_cast<T*>(dst), static_cast<const T*>(src), n);
  });
  Y9_CHECK_SHAPE(ok, "comm_accumulate: dtype ", engine::dtype_name(dt), " not supported on cuda");
}

void scale_entry(engine::DeviceContext& ctx, DType dt, void* data, int64_t n, double k) {
  if (n <= 0) return;
  cudaStream_t st = comm_stream(ctx);
  const bool ok = dispatch_float(dt, [&]<typename T>() {
    using C = typename Scalar<T>::C;
    Y9_LAUNCH(scale_kernel<T>, grid_for(n), kBlock, 0, st, static_cast<T*>(data), n, static_cast<C>(k));
  });
  Y9_CHECK_SHAPE(ok, "comm_scale: dtype ", engine::dtype_name(dt), " not supported on cuda");
}

template <typename T>
__global__ void compress_kernel(const float* __restrict__ s, T* __restrict__ d, int64_t n, float k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = Scalar<T>::store(s[i] * k);
}

template <typename T>
__global__ void decompress_kernel(const T* __restrict__ s, float* __restrict__ d, int64_t n, float k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    d[i] = Scalar<T>::load(s[i]) * k;
}

void compress_entry(engine::DeviceContext& ctx, DType wire, const float* src, void* dst, int64_t n, double scale) {
  if (n <= 0) return;
  cudaStream_t st = comm_stream(ctx);
  const bool ok = dispatch_float(wire, [&]<typename T>() {
    Y9_LAUNCH(compress_kernel<T>, grid_for(n), kBlock, 0, st, src, static_cast<T*>(dst), n, static_cast<float>(scale));
  });
  Y9_CHECK_SHAPE(ok, "comm_compress: dtype ", engine::dtype_name(wire), " not supported on cuda");
}

void decompress_entry(engine::DeviceContext& ctx, DType wire, const void* src, float* dst, int64_t n, double scale) {
  if (n <= 0) return;
  cudaStream_t st = comm_stream(ctx);
  const bool ok = dispatch_float(wire, [&]<typename T>() {
    Y9_LAUNCH(decompress_kernel<T>, grid_for(n), kBlock, 0, st, static_cast<const T*>(src), dst, n, static_cast<float>(scale));
  });
  Y9_CHECK_SHAPE(ok, "comm_decompress: dtype ", engine::dtype_name(wire), " not supported on cuda");
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kCommAccumulate, &accumulate_entry, engine::kFloating);
  b.add(kCommScale, &scale_entry, engine::kFloating);
  b.add(kCommCompress, &compress_entry, engine::DTypeSet{DType::F32, DType::F16, DType::BF16});
  b.add(kCommDecompress, &decompress_entry, engine::DTypeSet{DType::F32, DType::F16, DType::BF16});
}

}  // namespace kernels::cuda
