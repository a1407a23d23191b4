// Library entries under the CUDA-on-CPU emulator (issue 11, part 6): cuDNN, cuBLAS and NCCL cannot
// be emulated, so the CUDA backend serves those entries with the CPU backend's implementation
// (oneDNN, BLAS). Emulated device memory is host memory, so the CPU entry reads and writes the
// device buffers directly once the stream's queued work has run. The CPU has F32/F64 only: F16 and
// BF16 operands are upcast to F32 host buffers, computed in F32 and the result rounded back
// (upcast_f32 / round_from_f32), which is what cuDNN/cuBLAS compute with FP32 accumulation, up to
// the summation order. Emulator builds only.
#pragma once
#if !defined(Y9_CUDA_EMULATOR)
#error "kernels/cuda/cpu_fallback.h is for the CUDA-on-CPU emulator build only"
#endif
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/half.h"

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

/// Whether `dt` is F16 or BF16: the dtypes the fallback computes in F32 (the CPU has no entry).
inline bool fallback_upcasts(engine::DType dt) { return dt == engine::DType::F16 || dt == engine::DType::BF16; }

/// The `n` F16 or BF16 elements at `p` (emulated device memory, already synchronised) as F32.
/// Throws engine::ShapeError on another dtype.
inline std::vector<float> upcast_f32(const void* p, size_t n, engine::DType dt) {
  Y9_CHECK_SHAPE(fallback_upcasts(dt), "cpu fallback: upcast of ", engine::dtype_name(dt));
  std::vector<float> out(n);
  const uint16_t* h = static_cast<const uint16_t*>(p);
  if (dt == engine::DType::F16) {
    for (size_t i = 0; i < n; ++i) out[i] = engine::f16_to_f32(h[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = engine::bf16_to_f32(h[i]);
  }
  return out;
}

/// Rounds the `n` F32 values `src` to F16 or BF16 (round to nearest even) into `dst`.
/// Throws engine::ShapeError on another dtype.
inline void round_from_f32(const float* src, size_t n, engine::DType dt, void* dst) {
  Y9_CHECK_SHAPE(fallback_upcasts(dt), "cpu fallback: rounding to ", engine::dtype_name(dt));
  uint16_t* h = static_cast<uint16_t*>(dst);
  if (dt == engine::DType::F16) {
    for (size_t i = 0; i < n; ++i) h[i] = engine::f32_to_f16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) h[i] = engine::f32_to_bf16(src[i]);
  }
}

}  // namespace kernels::cuda
