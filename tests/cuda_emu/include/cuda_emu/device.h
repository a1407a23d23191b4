// CUDA-on-CPU emulator (docs/cuda_emulator.md): the device side of CUDA C++ for the host compiler,
// so that kernels/cuda/*.cu compile unchanged with g++ (-x c++) and run on the CPU.
//  - Qualifiers (__global__, __device__, __host__, __forceinline__) expand to nothing or inline;
//    __shared__ expands to `static`: blocks run one after another, so a function-local static is
//    exactly one block's shared memory.
//  - threadIdx, blockIdx, blockDim, gridDim read the values of the running emulated thread.
//  - Each CUDA thread is a fiber (ucontext); fibers switch only inside __syncthreads and the warp
//    intrinsics, which are checked: divergence at a barrier, threads that exited while others wait,
//    and lanes missing from a warp intrinsic's mask are reported with their source lines (the macros
//    capture __FILE__/__LINE__). A failure ends the launch; the stream's next synchronisation
//    returns cudaErrorLaunchFailure and cudaGetErrorString gives the message.
//  - Atomics are plain read-modify-writes: fibers of one launch share one OS thread and never
//    switch inside an atomic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "cuda_runtime_api.h"


#if __has_include(<vector_types.h>)
// The toolkit's uint3/dim3 (the toolkit include folder follows this one): its cuda_fp16.h and
// cuda_bf16.h then compile under the emulator with the same vector types.
#include <vector_types.h>
#else
/// CUDA's built-in vector of 3 unsigned ints (threadIdx, blockIdx).
struct uint3 {
  unsigned x, y, z;
};
/// CUDA's launch-dimension type: unspecified components are 1.
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
#endif

// After the toolkit's host_defines.h (through vector_types.h), which defines these for a host
// compiler as attributes g++ does not know.
#undef __global__
#undef __device__
#undef __host__
#undef __noinline__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __noinline__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

namespace cuda_emu {

/// Byte written over dynamic shared memory before every block: 0xFF reads as NaN in every
/// floating type and as -1 (or the maximum) in the integer types.
constexpr unsigned char kSharedPoison = 0xFF;

/// Thread order of every block (and block order of every grid): forward (0, 1, ...) or reverse.
/// The default comes from the environment (Y9_EMU_REVERSE=1 means reverse), read once; a call
/// overrides it for the rest of the process. Running a test in both orders exposes kernels
/// whose result depends on the order of unsynchronised threads.
void set_thread_order(bool reverse);
/// True when threads run in reverse order (see set_thread_order).
bool reverse_order();

/// Queues a launch of `body` (called once per emulated thread) over `grid` x `block` threads with
/// `shmem` bytes of dynamic shared memory on `stream`; it runs at the stream's next
/// synchronisation point. An invalid configuration (no threads, more than 1024 per block, grid
/// y/z over 65535, more than 48 KiB of dynamic shared memory) is not queued: it sets the last
/// error to cudaErrorInvalidConfiguration, as the real launch does. `file`/`line` name the launch
/// site in messages.
void launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, std::function<void()> body, const char* file,
            int line);

/// The running block's dynamic shared memory (poisoned with kSharedPoison before each block),
/// nullptr when the launch asked for none. Device code reaches it through Y9_DYNAMIC_SHARED.
void* dynamic_shared();

/// Launches run so far (all streams): tests use it to see that work was queued or ran.
uint64_t launches_run();

/// cudaMemcpy/cudaMemcpyAsync calls so far that copied from device memory to host (pageable or
/// pinned) memory, counted when issued: tests use it to check that a code path never reads the
/// device from the host.
uint64_t device_to_host_copies();

/// Calls so far that made the host wait for queued device work: cudaStreamSynchronize,
/// cudaDeviceSynchronize, cudaEventSynchronize on an event not yet reached, and the blocking
/// cudaMemcpy. Tests use it to see where a code path synchronises with the host.
uint64_t host_synchronizations();

namespace detail {
struct Builtins {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
/// The builtins of the running emulated thread; aborts with a message outside a kernel.
const Builtins& builtins();

enum class WarpOp { Sync, Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All };
/// Waits until every lane named in `mask` has reached the same intrinsic (same site, same mask),
/// then writes this lane's result (`size` bytes) to `out`. `param` is the source lane, delta or
/// lane mask of the shuffles; `in` is this lane's value (an int predicate for the votes).
void warp_op(WarpOp op, unsigned mask, const void* in, void* out, size_t size, int param, int width, const char* file,
             int line);
/// The counting block barrier behind __syncthreads.
void barrier(const char* file, int line);

template <typename T>
T shfl(WarpOp op, const char* file, int line, unsigned mask, T v, int param, int width) {
  static_assert(sizeof(T) <= 16, "warp shuffles move at most 16 bytes per lane");
  T out = v;
  warp_op(op, mask, &v, &out, sizeof(T), param, width, file, line);
  return out;
}
inline unsigned vote(WarpOp op, const char* file, int line, unsigned mask, int pred) {
  int p = pred != 0;
  unsigned out = 0;
  warp_op(op, mask, &p, &out, sizeof(out), 0, 32, file, line);
  return out;
}
}  // namespace detail
}  // namespace cuda_emu

#define threadIdx (::cuda_emu::detail::builtins().thread_idx)
#define blockIdx (::cuda_emu::detail::builtins().block_idx)
#define blockDim (::cuda_emu::detail::builtins().block_dim)
#define gridDim (::cuda_emu::detail::builtins().grid_dim)

#define __syncthreads() ::cuda_emu::detail::barrier(__FILE__, __LINE__)
#define __syncwarp(...) ::cuda_emu::detail::y9_syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(mask, v, ...) \
  ::cuda_emu::detail::shfl_sync(::cuda_emu::detail::WarpOp::Shfl, __FILE__, __LINE__, mask, v, __VA_ARGS__)
#define __shfl_up_sync(mask, v, ...) \
  ::cuda_emu::detail::shfl_sync(::cuda_emu::detail::WarpOp::ShflUp, __FILE__, __LINE__, mask, v, __VA_ARGS__)
#define __shfl_down_sync(mask, v, ...) \
  ::cuda_emu::detail::shfl_sync(::cuda_emu::detail::WarpOp::ShflDown, __FILE__, __LINE__, mask, v, __VA_ARGS__)
#define __shfl_xor_sync(mask, v, ...) \
  ::cuda_emu::detail::shfl_sync(::cuda_emu::detail::WarpOp::ShflXor, __FILE__, __LINE__, mask, v, __VA_ARGS__)
#define __ballot_sync(mask, pred) \
  ::cuda_emu::detail::vote(::cuda_emu::detail::WarpOp::Ballot, __FILE__, __LINE__, mask, pred)
#define __any_sync(mask, pred) \
  static_cast<int>(::cuda_emu::detail::vote(::cuda_emu::detail::WarpOp::Any, __FILE__, __LINE__, mask, pred))
#define __all_sync(mask, pred) \
  static_cast<int>(::cuda_emu::detail::vote(::cuda_emu::detail::WarpOp::All, __FILE__, __LINE__, mask, pred))

/// Threads per warp, as the built-in variable of CUDA C++.
constexpr int warpSize = 32;

namespace cuda_emu::detail {
template <typename T>
T shfl_sync(WarpOp op, const char* file, int line, unsigned mask, T v, int param, int width = 32) {
  return shfl(op, file, line, mask, v, param, width);
}
inline void y9_syncwarp(const char* file, int line, unsigned mask = 0xffffffffu) {
  int dummy = 0;
  warp_op(WarpOp::Sync, mask, &dummy, &dummy, 0, 0, 32, file, line);
}
}  // namespace cuda_emu::detail

// --- atomics: fibers never switch inside these, so a plain read-modify-write is atomic ----------
template <typename T, typename U>
inline T atomicAdd(T* p, U v) {
  T old = *p;
  *p = static_cast<T>(old + static_cast<T>(v));
  return old;
}
template <typename T, typename U>
inline T atomicSub(T* p, U v) {
  T old = *p;
  *p = static_cast<T>(old - static_cast<T>(v));
  return old;
}
template <typename T, typename U>
inline T atomicMax(T* p, U v) {
  T old = *p;
  if (static_cast<T>(v) > old) *p = static_cast<T>(v);
  return old;
}
template <typename T, typename U>
inline T atomicMin(T* p, U v) {
  T old = *p;
  if (static_cast<T>(v) < old) *p = static_cast<T>(v);
  return old;
}
template <typename T, typename U>
inline T atomicExch(T* p, U v) {
  T old = *p;
  *p = static_cast<T>(v);
  return old;
}
template <typename T, typename U, typename V>
inline T atomicCAS(T* p, U compare, V v) {
  T old = *p;
  if (old == static_cast<T>(compare)) *p = static_cast<T>(v);
  return old;
}
template <typename T, typename U>
inline T atomicOr(T* p, U v) {
  T old = *p;
  *p = old | static_cast<T>(v);
  return old;
}
template <typename T, typename U>
inline T atomicAnd(T* p, U v) {
  T old = *p;
  *p = old & static_cast<T>(v);
  return old;
}
