// Kernel entries of concat along one dim: contiguous pieces viewed as [outer, size_k * inner] rows.
#pragma once
#include <cstdint>

#include "engine/backend.h"

namespace kernels {

/// out [outer, total * inner] (contiguous) receives piece k, a contiguous [outer, sizes[k] *
/// inner] block, at column offset (sum of earlier sizes) * inner. `n` pieces.
using ConcatForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, void* out,
                                 const void* const* ins, const int64_t* sizes, int n, int64_t outer, int64_t inner);
inline engine::KernelKey<ConcatForwardFn> kConcatForward{"concat_forward"};

/// The inverse copy: dy [outer, total * inner] split into dxs[k] [outer, sizes[k] * inner]; a null
/// dxs[k] is skipped.
using ConcatBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* dy,
                                  void* const* dxs, const int64_t* sizes, int n, int64_t outer, int64_t inner);
inline engine::KernelKey<ConcatBackwardFn> kConcatBackward{"concat_backward"};

}  // namespace kernels
