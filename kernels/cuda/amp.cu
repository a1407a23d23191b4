// CUDA twins of the AMP loss-scaling entries (kernels/common/amp.h; CPU twins kernels/cpu/amp.cpp),
// issue 11, after PyTorch's ATen/native/cuda/AmpKernels.cu:
// - amp_unscale: one grid-stride launch per non-empty range of the flat F32 gradient buffer;
//   every element is multiplied by *inv_scale (read on the device) and a thread that meets an
//   inf/NaN stores 1.0f into *found_inf. Several threads may store concurrently, always the same
//   value, as PyTorch's _amp_foreach_non_finite_check_and_unscale_ does: no atomics, and the
//   result does not depend on the thread order.
// - amp_update_scale: a single-thread launch applying amp_update_scale_value to the device-side
//   scale and growth tracker (torch._amp_update_scale_).
// No host synchronisation, allocation or copy in either entry.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/amp.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

namespace {

__global__ void amp_unscale_kernel(float* __restrict__ g, int64_t n, const float* __restrict__ inv_scale,
                                   float* __restrict__ found_inf) {
  const float inv = *inv_scale;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  bool found = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
    bool nf = false;
    g[i] = amp_unscale_value(g[i], inv, nf);
    found = found || nf;
  }
  if (found) *found_inf = 1.f;
}

__global__ void amp_update_scale_kernel(float* scale, int32_t* growth_tracker, const float* found_inf,
                                        double growth_factor, double backoff_factor, int32_t growth_interval) {
  amp_update_scale_value(*scale, *growth_tracker, *found_inf, growth_factor, backoff_factor, growth_interval);
}

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

/// amp_unscale on CUDA: g (F32 device buffer), inv_scale and found_inf (one F32 each, device
/// memory); `ranges` is host memory.
void amp_unscale(engine::DeviceContext& ctx, float* g, const FlatRange* ranges, int64_t n_ranges,
                 const float* inv_scale, float* found_inf) {
  cudaStream_t stream = stream_of(ctx);
  for (int64_t r = 0; r < n_ranges; ++r) {
    const FlatRange& rg = ranges[r];
    Y9_CHECK_SHAPE(rg.offset >= 0 && rg.n >= 0, "amp_unscale: flat range ", r, " (offset ", rg.offset, ", n ", rg.n,
                   ") must not be negative");
    if (rg.n == 0) continue;
    Y9_LAUNCH(amp_unscale_kernel, grid_for(rg.n), kBlock, 0, stream, g + rg.offset, rg.n, inv_scale, found_inf);
  }
}

/// amp_update_scale on CUDA: scale (F32), growth_tracker (I32) and found_inf (F32), one element
/// each in device memory.
void amp_update_scale(engine::DeviceContext& ctx, float* scale, int32_t* growth_tracker, const float* found_inf,
                      double growth_factor, double backoff_factor, int32_t growth_interval) {
  Y9_LAUNCH(amp_update_scale_kernel, 1u, 1u, 0, stream_of(ctx), scale, growth_tracker, found_inf, growth_factor,
            backoff_factor, growth_interval);
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  const engine::DTypeSet f32{engine::DType::F32};
  b.add(kAmpUnscale, &amp_unscale, f32);
  b.add(kAmpUpdateScale, &amp_update_scale, f32);
}

}  // namespace kernels::cuda
