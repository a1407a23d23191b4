// CPU twin of the official non_max_suppression (see nms.h). Follows utils/general.py step by
// step in FP32 so boxes, scores and order match the official output exactly; the greedy pass
// uses the "compare with kept boxes" form of torchvision's loop (same result, stops at max_det).
#include "kernels/cpu/nms.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/common/box.h"

namespace kernels::cpu {

// ---------------------------------------------------------------------------------------------
int64_t nms_greedy_cpu(const float* boxes, const float* scores, int64_t n, double iou_thres, int64_t* keep,
                       int64_t max_keep) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  std::vector<float> areas(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float* b = boxes + 4 * i;
    areas[i] = (b[2] - b[0]) * (b[3] - b[1]);
  }
  int64_t nk = 0;
  for (int64_t oi = 0; oi < n && nk < max_keep; ++oi) {
    const int64_t i = order[oi];
    bool suppressed = false;
    for (int64_t k = 0; k < nk; ++k) {
      const int64_t j = keep[k];
      const float ovr = nms_overlap(boxes + 4 * j, areas[j], boxes + 4 * i, areas[i]);
      if (static_cast<double>(ovr) > iou_thres) {
        suppressed = true;
        break;
      }
    }
    if (!suppressed) keep[nk++] = i;
  }
  return nk;
}

// ---------------------------------------------------------------------------------------------
namespace {
struct Det {
  float conf;
  int32_t cls;
  int64_t row;    // source row (candidate anchors, then label rows)
};
/// Total order equal to a stable descending sort by confidence (ties keep generation order).
/// (row, class) order is the official generation order (nonzero() over [rows, classes]).
inline bool det_before(const Det& a, const Det& b) {
  if (a.conf != b.conf) return a.conf > b.conf;
  return a.row != b.row ? a.row < b.row : a.cls < b.cls;
}
}  // namespace

void non_max_suppression_image_cpu(const float* pred, int64_t stride_c, int64_t stride_a, int64_t nc, int64_t nm,
                                   int64_t anchors, const float* labels, int64_t n_labels, const NmsConfig& cfg,
                                   std::vector<float>& out) {
  out.clear();
  const int64_t width = 6 + nm;
  const float conf = cfg.conf_thres;
  const bool multi_label = cfg.multi_label && nc > 1;

  // 1. Candidates: max class score > conf_thres (xc). Row-wise max keeps memory access linear.
  std::vector<float> best(static_cast<size_t>(anchors), -INFINITY);
  for (int64_t c = 0; c < nc; ++c) {
    const float* s = pred + (4 + c) * stride_c;
    for (int64_t a = 0; a < anchors; ++a) {
      const float v = s[a * stride_a];
      if (v > best[a] || std::isnan(v)) best[a] = v;  // amax propagates NaN; NaN > conf is false
    }
  }
  std::vector<int64_t> cand;
  for (int64_t a = 0; a < anchors; ++a)
    if (best[a] > conf) cand.push_back(a);
  const int64_t n_rows = static_cast<int64_t>(cand.size()) + (labels ? n_labels : 0);
  if (n_rows == 0) return;

  // Row accessors: candidate anchors first, then --save-hybrid label rows (score 1 at class).
  const int64_t n_cand = static_cast<int64_t>(cand.size());
  auto box_of = [&](int64_t r, float* xywh) {
    if (r < n_cand) {
      for (int k = 0; k < 4; ++k) xywh[k] = pred[k * stride_c + cand[r] * stride_a];
    } else {
      const float* l = labels + 5 * (r - n_cand);
      for (int k = 0; k < 4; ++k) xywh[k] = l[1 + k];
    }
  };
  auto score_of = [&](int64_t r, int64_t c) -> float {
    if (r < n_cand) return pred[(4 + c) * stride_c + cand[r] * stride_a];
    return static_cast<int64_t>(labels[5 * (r - n_cand)]) == c ? 1.f : 0.f;
  };
  auto class_ok = [&](int64_t c) {
    if (!cfg.classes) return true;
    for (int64_t k = 0; k < cfg.n_classes; ++k)
      if (cfg.classes[k] == c) return true;
    return false;
  };

  // 2-3. Detections (multi-label or best class) and class filter; boxes converted below.
  std::vector<Det> dets;
  for (int64_t r = 0; r < n_rows; ++r) {
    if (multi_label) {
      if (r < n_cand) continue;  // candidate anchors are scanned class-major below
      for (int64_t c = 0; c < nc; ++c) {
        const float s = score_of(r, c);
        if (s > conf && class_ok(c)) dets.push_back({s, static_cast<int32_t>(c), r});
      }
    } else {
      int64_t bc = 0;
      float bs = score_of(r, 0);
      for (int64_t c = 1; c < nc; ++c) {
        const float s = score_of(r, c);
        if (s > bs) {  // first index on ties, as torch.max(dim)
          bs = s;
          bc = c;
        }
      }
      if (bs > conf && class_ok(bc)) dets.push_back({bs, static_cast<int32_t>(bc), r});
    }
  }
  if (multi_label) {  // class-major scan: contiguous reads of each class row
    for (int64_t c = 0; c < nc; ++c) {
      if (!class_ok(c)) continue;
      const float* sc = pred + (4 + c) * stride_c;
      for (int64_t r = 0; r < n_cand; ++r) {
        const float s = sc[cand[r] * stride_a];
        if (s > conf) dets.push_back({s, static_cast<int32_t>(c), r});
      }
    }
  }
  if (dets.empty()) return;

  // 4. Sort by confidence descending and keep the first max_nms. The official argsort leaves
  //    ties unspecified; we order ties by (row, class), the official generation order (= a stable sort). Only the top
  //    max_nms are needed, so select them first (multi-label can yield nc x anchors pairs).
  std::vector<int64_t> order(dets.size());
  std::iota(order.begin(), order.end(), 0);
  auto cmp = [&](int64_t a, int64_t b) { return det_before(dets[a], dets[b]); };
  const int64_t n_all = static_cast<int64_t>(dets.size());
  if (n_all > cfg.max_nms) {
    std::nth_element(order.begin(), order.begin() + cfg.max_nms, order.end(), cmp);
    order.resize(static_cast<size_t>(cfg.max_nms));
  }
  std::sort(order.begin(), order.end(), cmp);
  const int64_t n = static_cast<int64_t>(order.size());

  // 5. xywh -> xyxy; batched NMS through the class offset: boxes + cls * max_wh (FP32, as the
  //    official code), then greedy NMS on the shifted boxes. Input is already in descending
  //    score order, which torchvision's stable re-sort leaves unchanged.
  std::vector<float> xyxy(static_cast<size_t>(4 * n)), shifted(static_cast<size_t>(4 * n)), scores(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Det& d = dets[order[i]];
    float xywh[4];
    box_of(d.row, xywh);
    xywh_to_xyxy(xywh, &xyxy[4 * i]);
    const float off = static_cast<float>(d.cls) * (cfg.agnostic ? 0.f : cfg.max_wh);
    for (int k = 0; k < 4; ++k) shifted[4 * i + k] = xyxy[4 * i + k] + off;
    scores[i] = d.conf;
  }
  std::vector<int64_t> keep(static_cast<size_t>(n));
  const int64_t nk = nms_greedy_cpu(shifted.data(), scores.data(), n, cfg.iou_thres, keep.data(),
                                    std::max<int64_t>(cfg.max_det, 0));

  // 6. Output rows in the original coordinates.
  out.resize(static_cast<size_t>(nk * width));
  for (int64_t k = 0; k < nk; ++k) {
    const int64_t i = keep[k];
    const Det& d = dets[order[i]];
    float* o = out.data() + k * width;
    for (int q = 0; q < 4; ++q) o[q] = xyxy[4 * i + q];
    o[4] = d.conf;
    o[5] = static_cast<float>(d.cls);
    for (int64_t m = 0; m < nm; ++m)
      o[6 + m] = d.row < n_cand ? pred[(4 + nc + m) * stride_c + cand[d.row] * stride_a] : 0.f;
  }
}

// ---------------------------------------------------------------------------------------------
namespace {
/// nms_batched on the CPU (kernels/common/nms.h): the twin image by image, in parallel.
void nms_batched_cpu(engine::DeviceContext&, const float* pred, const NmsGeom& g, const NmsConfig& cfg,
                     int64_t capacity, float* out, int64_t* counts) {
  const int64_t width = 6 + g.nm;
#pragma omp parallel for schedule(dynamic) if (g.batch > 1)
  for (int64_t b = 0; b < g.batch; ++b) {
    std::vector<float> rows;
    non_max_suppression_image_cpu(pred + b * g.s[0], g.s[1], g.s[2], g.nc, g.nm, g.anchors, nullptr, 0, cfg, rows);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(rows.size()) / width, capacity);
    if (n > 0) std::memcpy(out + b * capacity * width, rows.data(), sizeof(float) * static_cast<size_t>(n * width));
    counts[b] = n;
  }
}
/// scale_boxes on the CPU (kernels/common/nms.h).
void scale_boxes_cpu(engine::DeviceContext&, float* boxes, int64_t n, int64_t cols, const ScaleBoxesParams& p) {
  for (int64_t i = 0; i < n; ++i)
    for (int k = 0; k < 4; ++k) boxes[i * cols + k] = scale_box_coord(boxes[i * cols + k], k, p);
}
}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kNmsBatched, &nms_batched_cpu, engine::DTypeSet{engine::DType::F32});
  b.add(kScaleBoxes, &scale_boxes_cpu, engine::DTypeSet{engine::DType::F32});
}

}  // namespace kernels::cpu
