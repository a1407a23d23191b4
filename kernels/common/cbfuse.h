// Kernel entries of CBFuse, the fusion step of YOLOv9's PGI auxiliary reversible branch: the sum
// of routed CBLinear pieces, each nearest-upsampled by an integer factor to x's size, plus x; and
// its backward (the nearest-upsample backward of every piece in one pass). The pieces are read in
// place through their strides (channel slices of a CBLinear output need no copy).
// Official use: CBFuse.forward in yolov9 models/common.py (F.interpolate(mode='nearest') of each
// piece, then torch.sum(torch.stack(res + [x]), dim=0)).
#pragma once
#include <cstdint>

#include "engine/backend.h"

namespace kernels {

/// One routed piece of CBFuse: a strided view [N, C, H/f, W/f] of the fused dtype, read in place.
struct CBFusePiece {
  const void* data;  ///< element (0, 0, 0, 0)
  int64_t s[4];      ///< element strides (N, C, H, W)
  int64_t f;         ///< integer nearest-upsampling factor to x's H and W (>= 1)
};

/// Geometry of CBFuse: x [N, C, H, W] with element strides xs[4]; the output (forward) and the
/// incoming gradient (backward) are contiguous [N, C, H, W].
struct CBFuseGeom {
  int64_t n, c, h, w;  ///< x's sizes (= the output's)
  int64_t xs[4];       ///< x's element strides (N, C, H, W)
};

/// out[n,c,y,x] = (((p_0 + p_1) + ...) + p_{np-1}) + x, with p_i = pieces[i][n,c,y/f_i,x/f_i]; every
/// add rounded to the dtype (as chained separate adds would round), pieces in order, x last; np == 0
/// copies x. out contiguous [N, C, H, W] (overwritten). A backend may split a long piece list
/// over several launches (same result: every partial sum is rounded to the dtype anyway).
using CBFuseForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const CBFusePiece* pieces,
                                 int np, const void* x, const CBFuseGeom& g, void* out);
inline engine::KernelKey<CBFuseForwardFn> kCBFuseForward{"cbfuse_forward"};

/// Piece gradients of CBFuse: dxs[i] (contiguous [N, C, H/f_i, W/f_i], overwritten; null skipped)
/// [n,c,h,w] = sum over a < f_i (rows), each row's f_i terms (columns b) summed first, of
/// dy[n,c,h*f_i+a,w*f_i+b] (the nearest-upsample backward, kUpsampleNearestBackward's order);
/// f_i == 1 copies dy. dy contiguous [N, C, H, W]. x's gradient is dy itself (no entry).
using CBFuseBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* dy,
                                  const CBFuseGeom& g, const int64_t* factors, void* const* dxs, int np);
inline engine::KernelKey<CBFuseBackwardFn> kCBFuseBackward{"cbfuse_backward"};

}  // namespace kernels
