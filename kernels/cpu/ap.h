// Numeric core of the detection metrics (raw arrays, CPU): val process_batch matching,
// ap_per_class / compute_ap, the ConfusionMatrix update, and the NumPy/PyTorch primitives they
// rely on (linspace, interp, trapz, argsort) reproduced so results match the official numbers.
#pragma once
#include <cstdint>
#include <vector>

namespace kernels::cpu {

/// torch.linspace(start, end, n) in FP32 (PyTorch's two-sided formula): out[n].
void linspace_f32(float start, float end, int64_t n, float* out);

/// NumPy's default argsort (introsort: quicksort, insertion sort below 17 elements, heapsort
/// fallback) of v[n] ascending, NaN last. Not stable; reproduced so ties order as in NumPy.
void np_argsort(const float* v, int64_t n, int64_t* idx);

/// numpy.interp(x, xp, fp, left, right) for one x (xp non-decreasing, n >= 1).
double np_interp(double x, const double* xp, const double* fp, int64_t n, double left, double right);

/// val_dual.py process_batch: correct[n_det, niou] (0/1) for detections [n_det, 6]
/// (x1, y1, x2, y2, conf, cls) and labels [n_lab, 5] (cls, x1, y1, x2, y2), FP32, same pixels.
/// Pair (label i, detection j) qualifies at threshold t when box_iou >= t and classes match;
/// pairs sorted by IoU descending (NumPy argsort reversed), de-duplicated per detection then per
/// label keeping first occurrences, as the official code (no re-sort between the two steps).
void process_batch_cpu(const float* det, int64_t n_det, const float* labels, int64_t n_lab, const float* iouv,
                       int64_t niou, uint8_t* correct);

/// Output of ap_per_class_cpu (C = number of classes present in the targets).
struct ApStats {
  std::vector<double> classes;   ///< [C] unique target classes, ascending
  std::vector<int64_t> nt;       ///< [C] targets per class
  std::vector<double> p, r, f1;  ///< [C] at the max smoothed mean-F1 confidence
  std::vector<double> tp, fp;    ///< [C] round(r * nt), round(tp / (p + eps) - tp)
  std::vector<double> ap;        ///< [C, niou] row-major
  int64_t best_index = 0;        ///< index into the 1000-point confidence grid
  std::vector<double> p_curve, r_curve, f1_curve;  ///< [C, 1000] vs confidence px
  std::vector<double> pr_curve;  ///< [C, 1000] precision envelope at recall px (IoU 0.5), for plots
};

/// utils/metrics.py ap_per_class(tp, conf, pred_cls, target_cls) with compute_ap 'interp'
/// (101-point, trapezoid). tp [n_pred, niou] 0/1, conf/pred_cls [n_pred], target_cls [n_tgt].
ApStats ap_per_class_cpu(const uint8_t* tp, const float* conf, const float* pred_cls, int64_t n_pred, int64_t niou,
                         const float* target_cls, int64_t n_tgt);

/// utils/metrics.py compute_ap(recall, precision) 'interp' for one curve of n points.
double compute_ap_cpu(const double* recall, const double* precision, int64_t n);

/// ConfusionMatrix.process_batch: matrix [(nc+1) x (nc+1)] row-major (rows predicted class,
/// columns true class, index nc = background). detections [n_det, 6] or nullptr (then every
/// label counts as [background, class]); labels [n_lab, 5] (cls, x1, y1, x2, y2); `conf` and
/// `iou_thres` as the official defaults 0.25 / 0.45 (compared in FP32).
void confusion_matrix_update_cpu(double* matrix, int64_t nc, const float* det, int64_t n_det, const float* labels,
                                 int64_t n_lab, float conf, float iou_thres);

}  // namespace kernels::cpu
