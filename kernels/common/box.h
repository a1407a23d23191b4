// Box math shared by the CPU twins and CUDA kernels: xywh <-> xyxy, IoU / GIoU / DIoU / CIoU
// exactly as the official utils/metrics.py bbox_iou and box_iou compute them (same operation
// order, eps = 1e-7), and the torchvision NMS overlap test. All functions are Y9_HD scalar code.
#pragma once
#include <cmath>

#include "engine/hd.h"

namespace kernels {

Y9_HD float k_atan(float x) { return atanf(x); }
Y9_HD double k_atan(double x) { return ::atan(x); }

/// Which overlap measure bbox_iou returns.
enum class IouKind : int { IoU = 0, GIoU = 1, DIoU = 2, CIoU = 3 };

/// Official eps of bbox_iou / box_iou (utils/metrics.py), in the compute type.
template <typename T> Y9_HD T box_eps() { return T(1e-7); }

/// cx, cy, w, h -> x1, y1, x2, y2 (utils/general.py xywh2xyxy: x1 = cx - w / 2, ...).
/// `in` and `out` may alias.
template <typename T> Y9_HD void xywh_to_xyxy(const T* in, T* out) {
  const T cx = in[0], cy = in[1], w = in[2], h = in[3];
  out[0] = cx - w / T(2);
  out[1] = cy - h / T(2);
  out[2] = cx + w / T(2);
  out[3] = cy + h / T(2);
}

/// x1, y1, x2, y2 -> cx, cy, w, h (utils/general.py xyxy2xywh). `in` and `out` may alias.
template <typename T> Y9_HD void xyxy_to_xywh(const T* in, T* out) {
  const T x1 = in[0], y1 = in[1], x2 = in[2], y2 = in[3];
  out[0] = (x1 + x2) / T(2);
  out[1] = (y1 + y2) / T(2);
  out[2] = x2 - x1;
  out[3] = y2 - y1;
}

/// Element-wise overlap of two boxes, utils/metrics.py bbox_iou(box1, box2, xywh, GIoU, DIoU,
/// CIoU, eps=1e-7). Boxes are 4 values, cx,cy,w,h when `xywh` else x1,y1,x2,y2 (the xyxy path
/// adds eps to the heights, as the official code does). CIoU's alpha = v / (v - iou + (1 + eps))
/// is the official no-grad weight; with xywh and identical boxes iou can round to 1 + 2^-23 and
/// the result is NaN (0/0), exactly as in the official code.
/// Source: GIoU, Rezatofighi et al., CVPR 2019; DIoU/CIoU, Zheng et al., AAAI 2020 (eq. 6-11).
template <typename T>
Y9_HD T bbox_iou(const T* box1, const T* box2, bool xywh, IouKind kind, T eps = box_eps<T>()) {
  T b1x1, b1y1, b1x2, b1y2, b2x1, b2y1, b2x2, b2y2, w1, h1, w2, h2;
  if (xywh) {
    w1 = box1[2]; h1 = box1[3]; w2 = box2[2]; h2 = box2[3];
    const T w1_ = w1 / T(2), h1_ = h1 / T(2), w2_ = w2 / T(2), h2_ = h2 / T(2);
    b1x1 = box1[0] - w1_; b1x2 = box1[0] + w1_; b1y1 = box1[1] - h1_; b1y2 = box1[1] + h1_;
    b2x1 = box2[0] - w2_; b2x2 = box2[0] + w2_; b2y1 = box2[1] - h2_; b2y2 = box2[1] + h2_;
  } else {
    b1x1 = box1[0]; b1y1 = box1[1]; b1x2 = box1[2]; b1y2 = box1[3];
    b2x1 = box2[0]; b2y1 = box2[1]; b2x2 = box2[2]; b2y2 = box2[3];
    w1 = b1x2 - b1x1; h1 = b1y2 - b1y1 + eps;
    w2 = b2x2 - b2x1; h2 = b2y2 - b2y1 + eps;
  }
  T iw = (b1x2 < b2x2 ? b1x2 : b2x2) - (b1x1 > b2x1 ? b1x1 : b2x1);
  T ih = (b1y2 < b2y2 ? b1y2 : b2y2) - (b1y1 > b2y1 ? b1y1 : b2y1);
  iw = iw > T(0) ? iw : T(0);
  ih = ih > T(0) ? ih : T(0);
  const T inter = iw * ih;
  const T a1 = w1 * h1;
  const T a2 = w2 * h2;
  const T sum_a = a1 + a2;
  const T union_ = sum_a - inter + eps;
  const T iou = inter / union_;
  if (kind == IouKind::IoU) return iou;
  const T cw = (b1x2 > b2x2 ? b1x2 : b2x2) - (b1x1 < b2x1 ? b1x1 : b2x1);
  const T ch = (b1y2 > b2y2 ? b1y2 : b2y2) - (b1y1 < b2y1 ? b1y1 : b2y1);
  if (kind == IouKind::GIoU) {
    const T c_area = cw * ch + eps;
    return iou - (c_area - union_) / c_area;
  }
  const T c2 = cw * cw + ch * ch + eps;
  const T dx = b2x1 + b2x2 - b1x1 - b1x2;
  const T dy = b2y1 + b2y2 - b1y1 - b1y2;
  const T rho2 = (dx * dx + dy * dy) / T(4);
  if (kind == IouKind::DIoU) return iou - rho2 / c2;
  // 4 / pi^2 as the official Python double, rounded to T as PyTorch does for a scalar factor.
  const T k = T(0.40528473456935108577551785283891);
  const T da = k_atan(w2 / h2) - k_atan(w1 / h1);
  const T v = k * (da * da);
  const T alpha = v / (v - iou + (T(1) + eps));
  return iou - (rho2 / c2 + v * alpha);
}

/// Pairwise IoU of two xyxy boxes as utils/metrics.py box_iou: inter / (area1 + area2 - inter
/// + 1e-7), area = (x2 - x1) * (y2 - y1). Used by val process_batch and ConfusionMatrix.
template <typename T> Y9_HD T box_iou_xyxy(const T* a, const T* b) {
  T iw = (a[2] < b[2] ? a[2] : b[2]) - (a[0] > b[0] ? a[0] : b[0]);
  T ih = (a[3] < b[3] ? a[3] : b[3]) - (a[1] > b[1] ? a[1] : b[1]);
  iw = iw > T(0) ? iw : T(0);
  ih = ih > T(0) ? ih : T(0);
  const T inter = iw * ih;
  const T area_a = (a[2] - a[0]) * (a[3] - a[1]);
  const T area_b = (b[2] - b[0]) * (b[3] - b[1]);
  return inter / (area_a + area_b - inter + box_eps<T>());
}

/// torchvision.ops.nms overlap of box i (area `area_i`) and box j (area `area_j`), xyxy:
/// inter / (area_i + area_j - inter) with no eps and no +1 (torchvision nms_kernel.cpp).
template <typename T> Y9_HD T nms_overlap(const T* bi, T area_i, const T* bj, T area_j) {
  const T xx1 = bi[0] > bj[0] ? bi[0] : bj[0];
  const T yy1 = bi[1] > bj[1] ? bi[1] : bj[1];
  const T xx2 = bi[2] < bj[2] ? bi[2] : bj[2];
  const T yy2 = bi[3] < bj[3] ? bi[3] : bj[3];
  const T w = xx2 - xx1 > T(0) ? xx2 - xx1 : T(0);
  const T h = yy2 - yy1 > T(0) ? yy2 - yy1 : T(0);
  const T inter = w * h;
  return inter / (area_i + area_j - inter);
}

}  // namespace kernels
