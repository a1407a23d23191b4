// Tensor-level detection metrics for validation: the IoU threshold vector, val process_batch
// (correct matrix), ap_per_class (P, R, F1, AP at 10 IoUs, mAP50, mAP50-95), the validation
// statistics accumulator and the ConfusionMatrix, matching the official utils/metrics.py and
// val_dual.py (shared/spec/eval.md section 4). Host-side evaluation code, not differentiable.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace ops {

/// iouv = torch.linspace(0.5, 0.95, 10) in FP32: [10] F32 on the CPU.
engine::Tensor iou_vector();

/// val_dual.py process_batch. detections [N, 6] (x1, y1, x2, y2, conf, cls) in NMS order,
/// labels [M, 5] (cls, x1, y1, x2, y2), both in the same pixels (original image); iouv [K].
/// Returns correct [N, K] Bool: detection j is a true positive at threshold t_k. Matching: pairs
/// with box_iou >= t_k and equal class, sorted by IoU descending, first pair per detection, then
/// per label the pair of the lowest detection index (the official second re-sort is commented
/// out). Throws ShapeError on bad shapes. Deterministic.
engine::Tensor process_batch(const engine::Tensor& detections, const engine::Tensor& labels,
                             const engine::Tensor& iouv);

/// Result of ap_per_class (C = classes present in the targets, ascending; K IoU thresholds).
struct ApResult {
  engine::Tensor ap_class;  ///< [C] I64
  engine::Tensor nt;        ///< [C] I64 targets per class
  engine::Tensor p, r, f1;  ///< [C] F64 at the confidence px[best_index] maximising smoothed mean F1
  engine::Tensor tp, fp;    ///< [C] F64 round(r * nt), round(tp / (p + 1e-16) - tp)
  engine::Tensor ap;        ///< [C, K] F64 AP per IoU threshold (101-point interpolation)
  int64_t best_index = 0;   ///< index into px = linspace(0, 1, 1000)
  engine::Tensor p_curve, r_curve, f1_curve;  ///< [C, 1000] F64 vs confidence px (plots)
  engine::Tensor pr_curve;                    ///< [C, 1000] F64 precision at recall px, IoU 0.5 (plots)
};

/// utils/metrics.py ap_per_class(tp, conf, pred_cls, target_cls). tp [D, K] Bool/integer/float
/// (nonzero = correct), conf [D], pred_cls [D], target_cls [T] (class indices as numbers).
/// Detections are ordered by NumPy's argsort(-conf) (ties as NumPy); classes without
/// predictions keep zeros. Throws ShapeError on inconsistent lengths. Deterministic.
/// Source: utils/metrics.py (YOLOv9 5b1ea9a), compute_ap method 'interp' (101-point COCO grid,
/// trapezoidal integration).
ApResult ap_per_class(const engine::Tensor& tp, const engine::Tensor& conf, const engine::Tensor& pred_cls,
                      const engine::Tensor& target_cls);

/// Dataset-level numbers printed and returned by val_dual.py.
struct ValMetrics {
  double mp = 0, mr = 0, map50 = 0, map = 0;  ///< mean P, R, mAP50, mAP50-95 over evaluated classes
  double fitness = 0;                         ///< 0.1 * mAP50 + 0.9 * mAP50-95 (best.pt selection)
  std::vector<double> maps;                   ///< [nc] per-class mAP50-95, overall map where absent
  std::vector<int64_t> nt_per_class;          ///< [nc] np.bincount of target classes
  int64_t seen = 0;                           ///< images added
  ApResult per_class;                         ///< undefined tensors when nothing was correct
};

/// The val stats list: add one image at a time (as val_dual.py's loop), then compute().
class DetectionMetrics {
 public:
  /// nc: number of classes of the dataset (1 with --single-cls).
  explicit DetectionMetrics(int64_t nc);
  int64_t nc() const { return nc_; }
  /// pred [N, 6] (x1, y1, x2, y2, conf, cls) in original-image pixels, NMS order; labels
  /// [M, 5] (cls, x1, y1, x2, y2) in the same pixels. With single_cls predicted classes become 0.
  /// Images without predictions contribute only their target classes. Throws ShapeError.
  void add_image(const engine::Tensor& pred, const engine::Tensor& labels, bool single_cls = false);
  /// ap_per_class over everything added; all metrics 0 when no detection is correct.
  ValMetrics compute() const;
  /// The statistics as bytes (for data-parallel validation: each rank evaluates a shard).
  std::string serialize() const;
  /// Appends the statistics of `bytes` (from serialize() of a metrics object with the same nc)
  /// after this object's: merging the shards of consecutive image ranges in order gives the
  /// statistics of one pass over all images. Throws engine::Error on malformed bytes or another nc.
  void merge_serialized(const std::string& bytes);

 private:
  int64_t nc_;
  int64_t seen_ = 0;
  std::vector<uint8_t> correct_;  // [D, 10]
  std::vector<float> conf_, pred_cls_, target_cls_;
};

/// utils/metrics.py ConfusionMatrix(nc, conf=0.25, iou_thres=0.45): matrix [(nc+1), (nc+1)],
/// rows predicted class, columns true class, index nc = background.
class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(int64_t nc, double conf = 0.25, double iou_thres = 0.45);
  /// detections [N, 6] (x1, y1, x2, y2, conf, cls), labels [M, 5] (cls, x1, y1, x2, y2).
  /// Throws ShapeError on bad shapes.
  void process_batch(const engine::Tensor& detections, const engine::Tensor& labels);
  /// An image without detections: every label class counts as [background, class].
  void process_background(const engine::Tensor& label_classes);
  /// [(nc+1), (nc+1)] F64 copy.
  engine::Tensor matrix() const;
  /// Diagonal (tp) and row sums minus diagonal (fp), background removed: [nc] F64 each.
  std::pair<engine::Tensor, engine::Tensor> tp_fp() const;
  int64_t nc() const { return nc_; }

 private:
  int64_t nc_;
  float conf_, iou_thres_;
  std::vector<double> m_;
};

}  // namespace ops
