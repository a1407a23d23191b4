// Library entries under the CUDA-on-CPU emulator (issue 11, part 6): cuDNN, cuBLAS and NCCL cannot
// be emulated, so the CUDA backend serves those entries with the CPU backend's implementation
// (oneDNN, BLAS). Emulated device memory is host memory, so the CPU entry reads and writes the
// device buffers directly once the stream's queued work has run. Emulator builds only.
#pragma once
#if !defined(Y9_CUDA_EMULATOR)
#error "kernels/cuda/cpu_fallback.h is for the CUDA-on-CPU emulator build only"
#endif
#include <utility>

#include "engine/backend.h"

namespace kernels::cuda {

/// Runs the CPU backend's entry `key` for `dtype` with `args` (the entry's arguments after its
/// DeviceContext) on the emulated device's buffers: first synchronises `ctx`'s compute stream (the
/// inputs are written by queued work), then calls the CPU entry synchronously, so later queued
/// work sees its output. Throws NotSupportedError when the CPU lacks the entry for `dtype`.
template <typename Fn, typename... A>
void run_on_cpu(engine::DeviceContext& ctx, const engine::KernelKey<Fn>& key, engine::DType dtype, A&&... args) {
  ctx.synchronize(engine::StreamKind::Compute);
  engine::Backend& cpu = engine::backend(engine::DeviceType::CPU);
  cpu.get(key, dtype)(cpu.context(engine::Device::cpu()), std::forward<A>(args)...);
}

}  // namespace kernels::cuda
