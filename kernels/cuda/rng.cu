// CUDA Philox fills: one thread per element, grid-stride loop, 64-bit indices.
#include "engine/cuda_runtime.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/common/rng.h"
#include "engine/core_kernels.h"

namespace kernels::cuda {

namespace {
__global__ void uniform_fill_kernel(float* out, int64_t n, uint64_t seed, uint64_t sid, uint64_t off, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = philox_uniform_elem(seed, sid, off, static_cast<uint64_t>(i), lo, hi);
}
__global__ void normal_fill_kernel(float* out, int64_t n, uint64_t seed, uint64_t sid, uint64_t off, float mean, float sd) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = philox_normal_elem(seed, sid, off, static_cast<uint64_t>(i), mean, sd);
}
unsigned grid_for(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}
}  // namespace

void uniform_fill_cuda(float* out, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t offset, float lo, float hi,
                       cudaStream_t stream) {
  if (n == 0) return;
  Y9_LAUNCH(uniform_fill_kernel, grid_for(n), 256, 0, stream, out, n, seed, stream_id, offset, lo, hi);
}

void normal_fill_cuda(float* out, int64_t n, uint64_t seed, uint64_t stream_id, uint64_t offset, float mean, float std,
                      cudaStream_t stream) {
  if (n == 0) return;
  Y9_LAUNCH(normal_fill_kernel, grid_for(n), 256, 0, stream, out, n, seed, stream_id, offset, mean, std);
}

namespace {

void uniform_entry(engine::DeviceContext& ctx, float* out, int64_t n, uint64_t seed, uint64_t sid, uint64_t off,
                   float lo, float hi) {
  uniform_fill_cuda(out, n, seed, sid, off, lo, hi, static_cast<cudaStream_t>(ctx.stream()));
}
void normal_entry(engine::DeviceContext& ctx, float* out, int64_t n, uint64_t seed, uint64_t sid, uint64_t off,
                  float mean, float sd) {
  normal_fill_cuda(out, n, seed, sid, off, mean, sd, static_cast<cudaStream_t>(ctx.stream()));
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(engine::kUniformFill, &uniform_entry, engine::DTypeSet{engine::DType::F32});
  b.add(engine::kNormalFill, &normal_entry, engine::DTypeSet{engine::DType::F32});
}

}  // namespace kernels::cuda
