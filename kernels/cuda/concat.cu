// CUDA concat entries (issue 11): the forward copies contiguous pieces [outer, sizes[k] * inner]
// into out [outer, total * inner] at their column offsets; the backward is the inverse copy into
// the gradient pieces (a null piece skipped). The CPU twin is kernels/cpu/concat.cpp. Pieces go
// to the kernel by value in groups of up to kGroup (no device-side pointer table): one launch per
// group, one thread per element of the group's columns, a grid-stride loop. A pure copy, so the
// kernel moves raw elements of the dtype's size (2, 4 or 8 bytes): bitwise exact in every dtype.

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/concat.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

using engine::DType;

namespace {

constexpr int kGroup = 8;  // pieces per launch

/// Up to kGroup pieces of one launch: piece j's pointer, its column offset in the big tensor's
/// rows, its row length, and its first column in the group's packed columns (start[j + 1] -
/// start[j] == len[j]; start[n] is the group's width).
template <typename E>
struct Group {
  E* piece[kGroup];
  int64_t big_col[kGroup];
  int64_t len[kGroup];
  int64_t start[kGroup + 1];
  int n;
};

// Forward: big[o, big_col[j] + c] = piece[j][o, c]; backward the reverse. `big_row` is the big
// tensor's row length (total * inner); `count` = outer * start[n].
template <typename E, bool Forward>
__global__ void concat_kernel(E* __restrict__ big, Group<E> grp, int64_t big_row, int64_t count) {
  const int64_t width = grp.start[grp.n];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / width, col = i % width;
    int j = 0;
    while (col >= grp.start[j + 1]) ++j;
    const int64_t local = col - grp.start[j];
    E* b = big + o * big_row + grp.big_col[j] + local;
    E* p = grp.piece[j] + o * grp.len[j] + local;
    if constexpr (Forward) *b = *p;
    else *p = *b;
  }
}

template <typename E, bool Forward>
void run(E* big, E* const* pieces, const int64_t* sizes, int n, int64_t outer, int64_t inner, cudaStream_t stream) {
  int64_t total = 0;
  for (int k = 0; k < n; ++k) total += sizes[k];
  const int64_t big_row = total * inner;
  if (outer == 0 || big_row == 0) return;
  Group<E> grp{};
  int64_t col = 0;
  auto flush = [&] {
    if (grp.n == 0) return;
    const int64_t count = outer * grp.start[grp.n];
    Y9_LAUNCH(concat_kernel<E, Forward>, grid_for(count), kBlock, 0, stream, big, grp, big_row, count);
    grp = Group<E>{};
  };
  for (int k = 0; k < n; ++k) {
    const int64_t len = sizes[k] * inner;
    if (pieces[k] != nullptr && len > 0) {
      const int j = grp.n;
      grp.piece[j] = pieces[k];
      grp.big_col[j] = col;
      grp.len[j] = len;
      grp.start[j + 1] = grp.start[j] + len;
      if (++grp.n == kGroup) flush();
    }
    col += len;
  }
  flush();
}

/// Calls f.template operator()<E>() with E an unsigned integer of the dtype's element size.
template <typename F>
bool dispatch_bytes(DType dt, F&& f) {
  if (!engine::is_floating(dt)) return false;
  switch (engine::dtype_size(dt)) {
    case 2: f.template operator()<uint16_t>(); return true;
    case 4: f.template operator()<uint32_t>(); return true;
    case 8: f.template operator()<uint64_t>(); return true;
    default: return false;
  }
}

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

// --- entries (signatures and semantics: kernels/common/concat.h) -------------------------------

/// concat_forward on CUDA: out contiguous [outer, total * inner] receives the n contiguous device
/// pieces ins[k] [outer, sizes[k] * inner] (a host array of device pointers) at column offset
/// (sum of earlier sizes) * inner; F32/F64/F16/BF16, copied bitwise.
void concat_fwd(engine::DeviceContext& ctx, DType dt, void* out, const void* const* ins, const int64_t* sizes, int n,
                int64_t outer, int64_t inner) {
  const bool ok = dispatch_bytes(dt, [&]<typename E>() {
    // The forward only reads the pieces; Group holds E* for both directions.
    std::vector<E*> ps(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) ps[k] = const_cast<E*>(static_cast<const E*>(ins[k]));
    run<E, true>(static_cast<E*>(out), ps.data(), sizes, n, outer, inner, stream_of(ctx));
  });
  Y9_CHECK_SHAPE(ok, "concat: dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64, f16, bf16)");
}

/// concat_backward on CUDA: dy contiguous [outer, total * inner] split into the device pieces
/// dxs[k] [outer, sizes[k] * inner] (overwritten; a null dxs[k] is skipped); copied bitwise.
void concat_bwd(engine::DeviceContext& ctx, DType dt, const void* dy, void* const* dxs, const int64_t* sizes, int n,
                int64_t outer, int64_t inner) {
  const bool ok = dispatch_bytes(dt, [&]<typename E>() {
    std::vector<E*> ps(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) ps[k] = static_cast<E*>(dxs[k]);
    // The backward only reads the big tensor.
    run<E, false>(const_cast<E*>(static_cast<const E*>(dy)), ps.data(), sizes, n, outer, inner, stream_of(ctx));
  });
  Y9_CHECK_SHAPE(ok, "concat backward: dtype ", engine::dtype_name(dt),
                 " not supported on cuda (f32, f64, f16, bf16)");
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kConcatForward, &concat_fwd, engine::kFloating);
  b.add(kConcatBackward, &concat_bwd, engine::kFloating);
}

}  // namespace kernels::cuda
