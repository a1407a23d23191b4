// Kernel entries of the blocked channel layout of the CPU (issue 15 item 1): oneDNN's
// nChw8c / nChw16c, held as a contiguous tensor [N, C / B, H, W, B] (B = 8 or 16 lanes, the
// channels c = cb * B + lane), in which the convolutions of a fused model read and write their
// activations without the reorders a plain NCHW tensor costs on every call. Only the CPU backend
// has them (a CUDA tensor is never blocked).
#pragma once
#include <cstdint>

#include "engine/backend.h"

namespace kernels {

/// The channel block oneDNN's convolutions prefer on this CPU: 16 with AVX-512, 8 with AVX2, 0
/// where the layout is not used (no x86 vector unit oneDNN has blocked kernels for).
using PreferredChannelBlockFn = int64_t (*)(engine::DeviceContext& ctx);
inline engine::KernelKey<PreferredChannelBlockFn> kPreferredChannelBlock{"preferred_channel_block"};

/// Layout conversion of contiguous buffers between plain [n, c, hw] and blocked [n, c / block, hw,
/// block] (c a multiple of block): `to_blocked` true reads plain x and writes blocked y, false the
/// reverse. A copy: exact.
using BlockedReorderFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* x, int64_t n, int64_t c,
                                  int64_t hw, int64_t block, bool to_blocked, void* y);
inline engine::KernelKey<BlockedReorderFn> kBlockedReorder{"blocked_reorder"};

/// Geometry of a blocked 2-d op: x [n, cb, h, w, block] contiguous -> y [n, cb, ho, wo, block]
/// contiguous.
struct BlockedPlane {
  int64_t n, cb, h, w, block;
  int64_t ho, wo;
};

/// Pooling on blocked planes, forward, with the semantics and the arithmetic of
/// the NCHW entries (kernels/common/spatial.h), so the values are bit-identical to them:
/// `max` true: max pooling with implicit -inf padding, NaN propagating; false: average pooling
/// with zero padding counted (count_include_pad), the window summed in row-major order from 0,
/// then times 1 / (k * k).
using BlockedPool2dFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* x,
                                 const BlockedPlane& g, bool max, int64_t kernel, int64_t stride, int64_t pad,
                                 void* y);
inline engine::KernelKey<BlockedPool2dFn> kBlockedPool2d{"blocked_pool2d"};

/// Nearest upsampling of blocked planes by an integer factor: y[n, cb, i, j, :] = x[n, cb, i / s,
/// j / s, :]; ho = h * s, wo = w * s.
using BlockedUpsampleNearestFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* x,
                                          const BlockedPlane& g, int64_t scale, void* y);
inline engine::KernelKey<BlockedUpsampleNearestFn> kBlockedUpsampleNearest{"blocked_upsample_nearest"};

/// Backward of average pooling on blocked planes (training): dx [n, cb, h, w, block] (overwritten)
/// from dy [n, cb, ho, wo, block], both contiguous; every element gets the same adds in the same
/// order as the NCHW entry kAvgPool2dBackward (kernels/common/spatial.h), so the bits are equal.
using BlockedAvgPool2dBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* dy,
                                            const BlockedPlane& g, int64_t kernel, int64_t stride, int64_t pad,
                                            void* dx);
inline engine::KernelKey<BlockedAvgPool2dBackwardFn> kBlockedAvgPool2dBackward{"blocked_avg_pool2d_backward"};

/// Backward of kBlockedUpsampleNearest (training): dx[n, cb, i, j, :] = the sum of dy over its
/// scale x scale window (overwritten), in kUpsampleNearestBackward's order (the same bits).
using BlockedUpsampleNearestBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* dy,
                                                  const BlockedPlane& g, int64_t scale, void* dx);
inline engine::KernelKey<BlockedUpsampleNearestBackwardFn> kBlockedUpsampleNearestBackward{
    "blocked_upsample_nearest_backward"};

}  // namespace kernels
