// The one kernel-launch helper of the CUDA backend (issue 11): every launch in kernels/cuda goes
// through Y9_LAUNCH, so the same .cu files compile under nvcc (a real <<<>>> launch) and under the
// host compiler against the CUDA-on-CPU emulator (-DY9_CUDA_EMULATOR=ON, docs/cuda_emulator.md;
// the launch is queued on the emulated stream), and every launch is checked in one place.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "engine/cuda_runtime.h"

namespace kernels::cuda {

/// Launches `kernel` over `grid` blocks of `block` threads with `shmem` bytes of dynamic shared
/// memory on `stream`, passing `args` (converted to the kernel's parameter types), then checks the
/// launch with engine::cuda_check_launch: throws engine::CudaError naming `file`:`line` on a bad
/// configuration (and, with Y9_SYNC_CHECK=1, on a fault found by synchronising `stream`). Call it
/// through Y9_LAUNCH, which passes the call site.
template <typename... P, typename... A>
void launch_kernel(const char* file, int line, void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem,
                   cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "Y9_LAUNCH: argument count differs from the kernel's parameters");
#if defined(Y9_CUDA_EMULATOR)
  cuda_emu::launch(
      grid, block, shmem, stream,
      [kernel, t = std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)]() { std::apply(kernel, t); }, file, line);
#else
  kernel<<<grid, block, shmem, stream>>>(std::forward<A>(args)...);
#endif
  engine::cuda_check_launch(stream, file, line);
}

}  // namespace kernels::cuda

/// Y9_LAUNCH(kernel, grid, block, shmem, stream, args...): see launch_kernel. `kernel` may be a
/// template instance with commas (map_kernel<T, N, F, true>).
#define Y9_LAUNCH(...) ::kernels::cuda::launch_kernel(__FILE__, __LINE__, __VA_ARGS__)

/// Declares `name` as a T* to the block's dynamic shared memory (the launch's shmem bytes):
/// extern __shared__ under nvcc; under the emulator a per-launch buffer refilled with
/// cuda_emu::kSharedPoison before every block, so reads before writes show up.
#if defined(Y9_CUDA_EMULATOR)
#define Y9_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::cuda_emu::dynamic_shared())
#else
#define Y9_DYNAMIC_SHARED(T, name)                    \
  extern __shared__ __align__(16) unsigned char y9_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(y9_dynamic_smem_)
#endif
