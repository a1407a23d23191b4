// Box math shared by the CPU twins and the CUDA kernels of the loss: CIoU forward/backward
// (official utils/metrics.py bbox_iou(xywh=False, CIoU=True)), DFL per side (official
// utils/loss_tal.py BboxLoss._df_loss), bbox2dist/dist2bbox (utils/tal/anchor_generator.py).
// All functions compute in the scalar type T (float for F32 data, double for the reference path).
#pragma once
#include <cmath>

#include "engine/backend.h"
#include "engine/hd.h"
#include "kernels/common/box.h"  // k_atan, IoU kinds shared with the metrics/NMS code

namespace kernels {

Y9_HD float k_log_box(float x) { return logf(x); }
Y9_HD double k_log_box(double x) { return ::log(x); }
Y9_HD float k_exp_box(float x) { return expf(x); }
Y9_HD double k_exp_box(double x) { return ::exp(x); }

/// Default eps of the official bbox_iou.
constexpr double kCiouEps = 1e-7;

/// CIoU of two xyxy boxes a = (x1, y1, x2, y2), b likewise, evaluated in the same operation order
/// as the official bbox_iou(box1=a, box2=b, xywh=False, CIoU=True, eps): eps is added to the
/// heights only, to the union and to c2; alpha = v / (v - iou + (1 + eps)).
/// Source: "Distance-IoU Loss" (Zheng et al., AAAI 2020), eq. 10-11; official utils/metrics.py.
template <typename T>
Y9_HD T ciou_fwd(const T* a, const T* b, T eps) {
  return bbox_iou(a, b, /*xywh=*/false, IouKind::CIoU, eps);
}

// Gradient split of torch.minimum/maximum: the selected side gets g, a tie gives g/2 to each.
template <typename T>
Y9_HD void minmax_bwd(T p, T q, bool is_min, T g, T& gp, T& gq) {
  if (p == q) {
    gp += g / T(2);
    gq += g / T(2);
  } else if ((p < q) == is_min) {
    gp += g;
  } else {
    gq += g;
  }
}

/// Backward of ciou_fwd: adds dy * dCIoU/da into ga[4] and dy * dCIoU/db into gb[4].
/// alpha is a constant (computed under no_grad officially); clamp(0) passes the gradient where
/// the clamped value is >= 0 and min/max split ties evenly (PyTorch 1.13 conventions).
template <typename T>
Y9_HD void ciou_bwd(const T* a, const T* b, T eps, T dy, T* ga, T* gb) {
  const T w1 = a[2] - a[0], h1 = a[3] - a[1] + eps;
  const T w2 = b[2] - b[0], h2 = b[3] - b[1] + eps;
  const T ix0 = (a[2] < b[2] ? a[2] : b[2]) - (a[0] > b[0] ? a[0] : b[0]);
  const T iy0 = (a[3] < b[3] ? a[3] : b[3]) - (a[1] > b[1] ? a[1] : b[1]);
  const T ix = ix0 > T(0) ? ix0 : T(0);
  const T iy = iy0 > T(0) ? iy0 : T(0);
  const T inter = ix * iy;
  const T uni = w1 * h1 + w2 * h2 - inter + eps;
  const T iou = inter / uni;
  const T cw = (a[2] > b[2] ? a[2] : b[2]) - (a[0] < b[0] ? a[0] : b[0]);
  const T ch = (a[3] > b[3] ? a[3] : b[3]) - (a[1] < b[1] ? a[1] : b[1]);
  const T c2 = cw * cw + ch * ch + eps;
  const T dx = b[0] + b[2] - a[0] - a[2];
  const T dyc = b[1] + b[3] - a[1] - a[3];
  const T rho2 = (dx * dx + dyc * dyc) / T(4);
  const T r1 = w1 / h1, r2 = w2 / h2;
  const T dat = k_atan(r2) - k_atan(r1);
  const T kv = T(4.0 / (M_PI * M_PI));
  const T v = kv * (dat * dat);
  const T alpha = v / (v - iou + (T(1) + eps));

  const T g_iou = dy;
  const T g_rho2 = -dy / c2;
  const T g_c2 = dy * rho2 / (c2 * c2);
  const T g_v = -dy * alpha;
  T g_inter = g_iou / uni;
  const T g_uni = -g_iou * inter / (uni * uni);
  T g_w1 = g_uni * h1, g_h1 = g_uni * w1, g_w2 = g_uni * h2, g_h2 = g_uni * w2;
  g_inter -= g_uni;
  const T g_dat = g_v * kv * T(2) * dat;
  const T g_r2 = g_dat / (T(1) + r2 * r2);
  const T g_r1 = -g_dat / (T(1) + r1 * r1);
  g_w2 += g_r2 / h2;
  g_h2 -= g_r2 * w2 / (h2 * h2);
  g_w1 += g_r1 / h1;
  g_h1 -= g_r1 * w1 / (h1 * h1);
  const T g_ix = ix0 >= T(0) ? g_inter * iy : T(0);
  const T g_iy = iy0 >= T(0) ? g_inter * ix : T(0);
  const T g_cw = g_c2 * T(2) * cw;
  const T g_ch = g_c2 * T(2) * ch;
  const T g_dx = g_rho2 * dx / T(2);
  const T g_dy = g_rho2 * dyc / T(2);
  // widths / heights
  ga[2] += g_w1; ga[0] -= g_w1; ga[3] += g_h1; ga[1] -= g_h1;
  gb[2] += g_w2; gb[0] -= g_w2; gb[3] += g_h2; gb[1] -= g_h2;
  // centre distance
  gb[0] += g_dx; gb[2] += g_dx; ga[0] -= g_dx; ga[2] -= g_dx;
  gb[1] += g_dy; gb[3] += g_dy; ga[1] -= g_dy; ga[3] -= g_dy;
  // intersection: min(x2) - max(x1)
  minmax_bwd(a[2], b[2], true, g_ix, ga[2], gb[2]);
  minmax_bwd(a[0], b[0], false, -g_ix, ga[0], gb[0]);
  minmax_bwd(a[3], b[3], true, g_iy, ga[3], gb[3]);
  minmax_bwd(a[1], b[1], false, -g_iy, ga[1], gb[1]);
  // enclosing box: max(x2) - min(x1)
  minmax_bwd(a[2], b[2], false, g_cw, ga[2], gb[2]);
  minmax_bwd(a[0], b[0], true, -g_cw, ga[0], gb[0]);
  minmax_bwd(a[3], b[3], false, g_ch, ga[3], gb[3]);
  minmax_bwd(a[1], b[1], true, -g_ch, ga[1], gb[1]);
}

/// bbox2dist for one anchor: (ax - x1, ay - y1, x2 - ax, y2 - ay) clamped to [0, reg_max - 0.01]
/// (official utils/tal/anchor_generator.py bbox2dist; the loss passes reg_max = 15).
template <typename T>
Y9_HD void bbox2dist_one(T ax, T ay, const T* box, double reg_max, T* out) {
  const T hi = static_cast<T>(reg_max - 0.01);  // official clamp bound is the Python double 14.99
  T d[4] = {ax - box[0], ay - box[1], box[2] - ax, box[3] - ay};
  for (int i = 0; i < 4; ++i) out[i] = d[i] < T(0) ? T(0) : (d[i] > hi ? hi : d[i]);
}

/// Softmax over n logits + expectation with (0, 1, ..., n-1): the distance of one side
/// (official DDetect/ComputeLoss bbox_decode: softmax(3) then matmul with proj = arange(n)).
/// Writes the probabilities to p[n] (may be null).
template <typename T>
Y9_HD T dfl_expect_fwd(const T* logits, int n, T* p) {
  T mx = logits[0];
  for (int k = 1; k < n; ++k) mx = logits[k] > mx ? logits[k] : mx;
  T s = T(0);
  for (int k = 0; k < n; ++k) s += k_exp_box(logits[k] - mx);
  T e = T(0);
  for (int k = 0; k < n; ++k) {
    const T pk = k_exp_box(logits[k] - mx) / s;
    if (p) p[k] = pk;
    e += pk * T(k);
  }
  return e;
}

/// Backward of dfl_expect_fwd: g_logits[k] += g * p_k * (k - E).
template <typename T>
Y9_HD void dfl_expect_bwd(const T* logits, int n, T g, T* g_logits) {
  T mx = logits[0];
  for (int k = 1; k < n; ++k) mx = logits[k] > mx ? logits[k] : mx;
  T s = T(0);
  for (int k = 0; k < n; ++k) s += k_exp_box(logits[k] - mx);
  T e = T(0);
  for (int k = 0; k < n; ++k) e += k_exp_box(logits[k] - mx) / s * T(k);
  for (int k = 0; k < n; ++k) g_logits[k] += g * (k_exp_box(logits[k] - mx) / s) * (T(k) - e);
}

/// Shared part of the DFL forward and backward for one side: the two target bins left =
/// trunc(y) (guarded into [0, n - 2]) and right = left + 1 with weights wl = right - y and
/// wr = 1 - wl, the logits' max `mx` and sum of exp(logit - mx) `s`.
template <typename T>
struct DflSide {
  int left, right;
  T wl, wr, mx, s;
  Y9_HD DflSide(const T* logits, int n, T y) {
    left = static_cast<int>(y);
    left = left < 0 ? 0 : (left > n - 2 ? n - 2 : left);  // guard memory; the loss clamps y first
    right = left + 1;
    wl = T(right) - y;
    wr = T(1) - wl;
    mx = logits[0];
    for (int k = 1; k < n; ++k) mx = logits[k] > mx ? logits[k] : mx;
    s = T(0);
    for (int k = 0; k < n; ++k) s += k_exp_box(logits[k] - mx);
  }
};

/// DFL of one side: ce(left) * (right - y) + ce(right) * (1 - (right - y)) with
/// left = trunc(y), right = left + 1, ce(k) = -log_softmax(logits)[k]; y in [0, n - 1).
/// Source: "Generalized Focal Loss" (Li et al., NeurIPS 2020) eq. 6; official BboxLoss._df_loss.
template <typename T>
Y9_HD T dfl_side_fwd(const T* logits, int n, T y) {
  const DflSide<T> d(logits, n, y);
  const T lse = k_log_box(d.s) + d.mx;
  return (lse - logits[d.left]) * d.wl + (lse - logits[d.right]) * d.wr;
}

/// Backward of dfl_side_fwd: g_logits[k] += g * (softmax_k - wl*[k==left] - wr*[k==right]).
template <typename T>
Y9_HD void dfl_side_bwd(const T* logits, int n, T y, T g, T* g_logits) {
  const DflSide<T> d(logits, n, y);
  for (int k = 0; k < n; ++k) {
    T t = k_exp_box(logits[k] - d.mx) / d.s;
    if (k == d.left) t -= d.wl;
    if (k == d.right) t -= d.wr;
    g_logits[k] += g * t;
  }
}

/// BCE with logits as the official loss computes it: nn.BCEWithLogitsLoss(pos_weight=[cls_pw = 1])
/// takes PyTorch 1.13's pos_weight branch, m = max(-x, 0), w = (pos_weight - 1) * t + 1 = 1:
/// (1 - t) * x + w * (log(exp(-m) + exp(-x - m)) + m). The order matters for the official numbers:
/// for the typical class logits of an nc=80 head (x ~ -11, bias_init log(5 / nc / (640 / s)^2)) the
/// term log(1 + e^x) ~ 1e-5 is first added to m ~ 11 and so rounded to m's ulp (~1e-6), which
/// quantises every background term (x < -15.1 gives exactly 0). Summed over anchors x classes this
/// moves the cls loss by ~6e-5 relative against the exact value (the no-pos_weight order
/// (1 - t) * x + m + log(...), used before, is within 1e-7 of it). The loss follows the official
/// value; the gradient (bce_logits_bwd) is the exact sigmoid(x) - t either way.
template <typename T>
Y9_HD T bce_logits_fwd(T x, T t) {
  const T m = -x > T(0) ? -x : T(0);
  return (T(1) - t) * x + (k_log_box(k_exp_box(-m) + k_exp_box(-x - m)) + m);
}

/// d BCE / dx = sigmoid(x) - t.
template <typename T>
Y9_HD T bce_logits_bwd(T x, T t) {
  return T(1) / (T(1) + k_exp_box(-x)) - t;
}

// --- kernel entries ----------------------------------------------------------------------------------

/// out[i] = CIoU(a[i], b[i]) for n xyxy box pairs (a, b: [n, 4] contiguous; eps as bbox_iou).
using CiouForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* a, const void* b,
                               void* out, int64_t n, double eps);
inline engine::KernelKey<CiouForwardFn> kCiouForward{"ciou_forward"};
/// ga[i] = gout[i] * dCIoU/da[i], gb likewise (overwrites; either may be null). alpha constant
/// (official no_grad), min/max ties split the gradient evenly.
using CiouBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* a, const void* b,
                                const void* gout, void* ga, void* gb, int64_t n, double eps);
inline engine::KernelKey<CiouBackwardFn> kCiouBackward{"ciou_backward"};

/// out[p] = mean over the 4 sides of DFL(logits[p, s, 0:nbins], target[p, s]); logits
/// [P, 4, nbins], target [P, 4] in [0, nbins - 1).
using DflForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* logits,
                              const void* target, void* out, int64_t P, int nbins);
inline engine::KernelKey<DflForwardFn> kDflForward{"dfl_forward"};
/// glogits[p, s, k] = gout[p] / 4 * dDFL_s/dlogits[k] (overwrites glogits).
using DflBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* logits,
                               const void* target, const void* gout, void* glogits, int64_t P, int nbins);
inline engine::KernelKey<DflBackwardFn> kDflBackward{"dfl_backward"};

}  // namespace kernels
