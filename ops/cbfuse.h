// CBFuse's fused op, the fusion step of YOLOv9's PGI auxiliary reversible branch: the sum of the
// routed CBLinear pieces, each nearest-upsampled to x's size, plus x, in one kernel (and its
// backward in one kernel) instead of one upsample and one add per piece.
#pragma once
#include <vector>

#include "engine/tensor.h"

namespace ops {

/// out [N, C, H, W] = upsample_nearest(pieces[0], f_0) + ... + upsample_nearest(pieces[n-1], f_{n-1})
/// + x, summed in that order (pieces first, x last), every add rounded to the dtype: bitwise the
/// result of the unfused chain add(add(add(up_0, up_1), ...), x), and of official
/// torch.sum(torch.stack(res + [x]), dim=0) evaluated as sequential adds.
/// pieces[i]: [N, C, H/f_i, W/f_i] with one integer factor f_i >= 1 for both H and W, contiguous
/// or strided (a channel slice of a CBLinear output is read in place, no copy); x: [N, C, H, W]
/// contiguous or strided. Output contiguous. Dtypes: one dtype for all, those the device's
/// cbfuse entries claim (CPU F32/F64; CUDA F32/F64/F16/BF16). No pieces: returns x itself.
/// Differentiable in every input: x's gradient is dy; piece i's is the nearest-upsample backward
/// of dy (the sum of each f_i x f_i window, kUpsampleNearestBackward's order), all pieces in one
/// backward pass. Throws engine::ShapeError on an undefined input, a rank other than 4, N or C
/// different from x's, a size that is not an integer fraction of x's (or two different factors),
/// or a dtype/device mismatch; NotSupportedError on an unclaimed dtype.
/// Source: "YOLOv9: Learning What You Want to Learn Using Programmable Gradient Information"
/// (Wang et al., 2024) sec. 4.1; official CBFuse.forward, yolov9 models/common.py. Bitwise
/// deterministic (no atomics).
engine::Tensor cbfuse(const std::vector<engine::Tensor>& pieces, const engine::Tensor& x);

}  // namespace ops
