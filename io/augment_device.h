// Host side of the device augmentation (issue 12, item 1): turns the pixel-free plans of
// io::AugmentedDataset::get (io::SamplePlan, drawn from the same seeded streams as the CPU path)
// into the parameter records of the batched kernels (kernels/common/augment.h), and the HSV model
// of the CPU path into the kernels' AugHsvModel. The kernels then reproduce the CPU pipeline's
// pixels (bilinear rounding within 1 grey level, HSV bitwise) while the boxes stay on the host.
#pragma once

#include <array>
#include <cstdint>

#include "io/augment.h"
#include "kernels/common/augment.h"

namespace io {

/// The rounding model of OpenCV's HSV2BGR that io::finish_to_planes follows on this machine (the
/// one-time verification of io/color.cpp runs first, if it has not yet).
kernels::AugHsvModel aug_hsv_model();

/// The warp of mosaic plan `m`: tile k (m.h[k] x m.w[k] x 3 uint8 BGR) at arena byte offset
/// off[k] with row step step[k]; the output is s x s (s = m.canvas / 2). Tiles with an empty
/// canvas rectangle are left out.
kernels::AugWarp mosaic_warp(const MosaicPlan& m, const std::array<int64_t, 4>& off,
                             const std::array<int64_t, 4>& step);

/// The warp of a non-mosaic training sample: the letterboxed lb_h x lb_w image at arena offset
/// `off` (row step `step`) as the only tile, warped by p.M when p.warp (else copied).
kernels::AugWarp image_warp(const SamplePlan& p, int64_t off, int64_t step);

/// The letterbox record of a non-mosaic sample whose load_image output (p.img_h x p.img_w) is at
/// `off` with row step `step`.
kernels::LetterboxSample letterbox_sample(const SamplePlan& p, int64_t off, int64_t step);

/// The full sample record: warps (one, or two for mixup), mixup ratio and the deferred pixel ops.
kernels::AugSample aug_sample(const SamplePlan& p, const kernels::AugWarp& w0,
                              const kernels::AugWarp* w1 = nullptr);

}  // namespace io
