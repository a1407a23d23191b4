// CPU twin of concat along one dim: contiguous pieces viewed as [outer, size_k * inner] rows.
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// Forward: out [outer, total * inner] (contiguous) receives piece k, a contiguous
/// [outer, sizes[k] * inner] block, at column offset (sum of earlier sizes) * inner.
/// `n` pieces; T = float or double (any trivially copyable T). Threaded over copy chunks.
template <typename T>
void concat_forward_cpu(T* out, const T* const* ins, const int64_t* sizes, int n, int64_t outer, int64_t inner);

/// Backward: the inverse copy. dy [outer, total * inner] (contiguous) is split into the
/// contiguous gradients dxs[k] [outer, sizes[k] * inner]; a null dxs[k] is skipped.
template <typename T>
void concat_backward_cpu(const T* dy, T* const* dxs, const int64_t* sizes, int n, int64_t outer, int64_t inner);

}  // namespace kernels::cpu
