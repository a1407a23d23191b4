// The bias parts of the CUDA convolution entries (kernels/cuda/conv.cpp): adding the per-channel
// bias to the convolution output, and its gradient, the per-channel sum of dy. cuDNN computes the
// convolution itself; these two are ours so that every dtype (F32, F64, F16, BF16) takes the same
// path and the bias gradient is deterministic (a fixed-order block reduction, no atomics). Under
// the CUDA-on-CPU emulator they run as they do on a GPU while the convolution is served by the
// CPU backend.
#include <cuda_runtime.h>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv_bias.h"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

namespace {

// y [n, c, hw] += bias[c]; grid-stride over every element.
template <typename T>
__global__ void bias_add_kernel(T* __restrict__ y, const T* __restrict__ bias, int64_t c, int64_t hw, int64_t total) {
  using S = Scalar<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = (i / hw) % c;
    y[i] = S::store(S::load(y[i]) + S::load(bias[ch]));
  }
}

// db[ch] = sum over n and hw of dy[n, ch, hw]: one block per channel, each thread sums a strided
// part in the compute type's accumulator (double for F64, float otherwise), then a fixed-order
// tree in shared memory. Deterministic for a given block size.
constexpr int kBiasBlock = 256;
template <typename T>
__global__ void bias_grad_kernel(const T* __restrict__ dy, T* __restrict__ db, int64_t n, int64_t c, int64_t hw) {
  using S = Scalar<T>;
  using C = typename S::C;
  __shared__ C part[kBiasBlock];
  const int64_t ch = blockIdx.x;
  const int64_t m = n * hw;
  C acc = C(0);
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const int64_t b = j / hw, p = j - b * hw;
    acc += S::load(dy[(b * c + ch) * hw + p]);
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned s = kBiasBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[ch] = S::store(part[0]);
}

}  // namespace

void conv_bias_add(cudaStream_t stream, engine::DType dt, void* y, const void* bias, int64_t n, int64_t c,
                   int64_t hw) {
  const int64_t total = n * c * hw;
  if (total == 0) return;
  const bool ok = dispatch_float(dt, [&]<typename T>() {
    Y9_LAUNCH(bias_add_kernel<T>, grid_for(total), kBlock, 0, stream, static_cast<T*>(y), static_cast<const T*>(bias),
              c, hw, total);
  });
  Y9_CHECK_SHAPE(ok, "conv2d bias: dtype ", engine::dtype_name(dt), " not supported on cuda");
}

void conv_bias_grad(cudaStream_t stream, engine::DType dt, const void* dy, void* dbias, int64_t n, int64_t c,
                    int64_t hw) {
  if (c == 0) return;
  const bool ok = dispatch_float(dt, [&]<typename T>() {
    Y9_LAUNCH(bias_grad_kernel<T>, static_cast<unsigned>(c), kBiasBlock, 0, stream, static_cast<const T*>(dy),
              static_cast<T*>(dbias), n, c, hw);
  });
  Y9_CHECK_SHAPE(ok, "conv2d bias gradient: dtype ", engine::dtype_name(dt), " not supported on cuda");
}

}  // namespace kernels::cuda
