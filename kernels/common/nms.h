// Kernel entry of the batched non-maximum suppression (issue 12 item 3): the official YOLOv9
// non_max_suppression (utils/general.py) for every image of a batch, on the prediction's device.
// The CPU entry runs the per-image twin (kernels/cpu/nms.h); the CUDA entry (kernels/cuda/nms.cu)
// handles the whole batch in one launch sequence and gives the same rows, bitwise.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/backend.h"
#include "engine/hd.h"

namespace kernels {

/// Settings of one non_max_suppression call (official names and defaults: see ops/nms.h).
struct NmsConfig {
  float conf_thres = 0.25f;      ///< candidate/detection threshold, compared with '>' in FP32
  double iou_thres = 0.45;       ///< suppression if IoU > iou_thres (compared in double, as torchvision)
  bool multi_label = false;      ///< one detection per (anchor, class) with score > conf_thres
  bool agnostic = false;         ///< no class offset
  int64_t max_det = 300;         ///< detections kept per image
  int64_t max_nms = 30000;       ///< boxes into NMS (highest scores)
  float max_wh = 7680.f;         ///< class offset in pixels
  const int64_t* classes = nullptr;  ///< optional class filter, host memory (nullptr: all classes)
  int64_t n_classes = 0;             ///< length of `classes`
};

/// Layout of the F32 prediction [B, 4 + nc + nm, A]: element (b, c, a) at
/// pred[b * s[0] + c * s[1] + a * s[2]] (any strides).
struct NmsGeom {
  int64_t batch, nc, nm, anchors;
  int64_t s[3];
};

/// Rows per image the batched entry can return: min(max_det, max_nms, anchors * (nc with
/// multi_label, else 1)), at least 0. The output buffer holds `capacity` rows per image.
inline int64_t nms_capacity(const NmsGeom& g, const NmsConfig& cfg) {
  const bool multi = cfg.multi_label && g.nc > 1;
  const int64_t pairs = g.anchors * (multi ? g.nc : 1);
  return std::max<int64_t>(0, std::min({cfg.max_det, cfg.max_nms, pairs}));
}

/// Largest anchors * nc the CUDA entry accepts (its sort key holds anchor * nc + class in 32 bits);
/// ops::non_max_suppression takes the host path above it.
inline constexpr int64_t kNmsMaxPairs = (int64_t(1) << 32) - 1;

/// Batched non_max_suppression without --save-hybrid labels: for every image b, the rows
/// [x1, y1, x2, y2, conf, cls, masks...] (6 + nm floats, NMS keep order) that
/// kernels::cpu::non_max_suppression_image_cpu gives, bitwise, written to
/// out[(b * capacity + k) * (6 + nm) ...] for k < counts[b] (rows past counts[b] are unspecified).
/// pred: F32 [B, 4 + nc + nm, A] (geometry g), device memory; out: device [B, capacity, 6 + nm];
/// counts: device int64 [B]; capacity = nms_capacity(g, cfg). cfg.classes is host memory.
/// Deterministic. The CUDA entry synchronises its compute stream once, mid-sequence (it reads the
/// B candidate counts to size the sort), and requires anchors * nc <= kNmsMaxPairs.
using NmsBatchedFn = void (*)(engine::DeviceContext& ctx, const float* pred, const NmsGeom& g, const NmsConfig& cfg,
                              int64_t capacity, float* out, int64_t* counts);
inline engine::KernelKey<NmsBatchedFn> kNmsBatched{"nms_batched"};

/// The letterbox undo of one image's detections (official utils/general.py scale_boxes with the
/// letterbox's ratio_pad, then clip_boxes; detect_dual.py then rounds with .round()).
struct ScaleBoxesParams {
  double gain = 1;              ///< letterbox scale: min(H / h0, W / w0)
  double pad_w = 0, pad_h = 0;  ///< half paddings (W - w0 * gain) / 2, (H - h0 * gain) / 2, pixels
  int32_t w0 = 0, h0 = 0;       ///< original image size, pixels
};

/// Coordinate k (0 x1, 1 y1, 2 x2, 3 y2) of a box in letterboxed pixels -> original pixels:
/// (v - pad) / gain in double, clamped to [0, w0 or h0], rounded to FP32, then to the nearest
/// integer (half to even, as torch.round). A NaN comes back as it came, bit for bit (a GPU's
/// double -> float conversion would make any NaN its canonical one). The one arithmetic of every entry.
Y9_HD float scale_box_coord(float v, int k, const ScaleBoxesParams& p) {
  if (v != v) return v;
  const bool x = k % 2 == 0;
  double d = (static_cast<double>(v) - (x ? p.pad_w : p.pad_h)) / p.gain;
  const double hi = x ? p.w0 : p.h0;
  d = d < 0.0 ? 0.0 : (d > hi ? hi : d);
  return rintf(static_cast<float>(d));
}

/// In place on `boxes` (F32, n rows of `cols` >= 4 floats, x1 y1 x2 y2 first; the entry's device
/// memory): columns 0..3 of every row through scale_box_coord. Deterministic; bitwise the same on
/// every backend.
using ScaleBoxesFn = void (*)(engine::DeviceContext& ctx, float* boxes, int64_t n, int64_t cols,
                              const ScaleBoxesParams& p);
inline engine::KernelKey<ScaleBoxesFn> kScaleBoxes{"scale_boxes"};

}  // namespace kernels
