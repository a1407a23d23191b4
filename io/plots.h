// The training and validation figures of the official YOLOv9 (utils/plots.py, utils/metrics.py
// plot_pr_curve / plot_mc_curve / ConfusionMatrix.plot), drawn with OpenCV through
// io/plot_canvas.h: results.png, confusion_matrix.png, PR/F1/P/R curves, labels.jpg and the
// train/val batch mosaics (shared/spec/eval.md section 7, shared/spec/train.md results.csv).
#pragma once
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace io {

/// results.png from results.csv (utils/plots.py plot_results). The CSV is the official one:
/// a header of right-aligned names (leading spaces are trimmed) and one row per epoch; the
/// columns used are epoch, train/{box,cls,dfl}_loss, metrics/{precision,recall,mAP_0.5,
/// mAP_0.5:0.95}, val/{box,cls,dfl}_loss, found by name. Draws a 2 x 5 grid (2000 x 900 px) in
/// the official order: train box, cls, dfl, precision, recall / val box, cls, dfl, mAP_0.5,
/// mAP_0.5:0.95, each value vs epoch as a line with markers plus scipy's gaussian_filter1d(y,
/// sigma=3) (mode 'reflect', truncate 4) as a dotted 'smooth' line. Non-numeric cells are skipped.
/// Throws engine::IoError naming the path if the CSV cannot be read, lacks a column, has no
/// rows, or out_png cannot be written. Deterministic.
void plot_results(const std::string& results_csv_path, const std::string& out_png);

/// confusion_matrix.png (utils/metrics.py ConfusionMatrix.plot). matrix: [nc+1, nc+1] any
/// floating/integer dtype, rows = predicted class, columns = true class, index nc = background.
/// With `normalize` each column is divided by (its sum + 1e-9); values < 0.005 are left blank.
/// Cell values are written (2 decimals, integers without normalize) when nc < 30; class names
/// label the ticks when 0 < names.size() < 99 and names.size() == nc, plus "background".
/// 1600 x 1300 px, 'Blues' colour map with a colour bar, axis labels "True" (x) and
/// "Predicted" (y), title "Confusion Matrix". Throws engine::ShapeError on a non-square matrix
/// or one smaller than 2 x 2, engine::IoError naming out_png when it cannot be written.
void plot_confusion_matrix(const engine::Tensor& matrix, const std::vector<std::string>& names, bool normalize,
                           const std::string& out_png);

/// PR_curve.png (utils/metrics.py plot_pr_curve). px: [P] recall grid (1000 points of
/// linspace(0, 1)), py: [C, P] precision per class at those recalls (IoU 0.5), ap50: [C] or
/// [C, K] (column 0 is used) AP@0.5 per class, names: C class names (or empty). Per-class lines
/// are thin and coloured with a legend "<name> 0.xxx" when 0 < names.size() < 21, else grey;
/// the mean over classes is a thick blue line labelled "all classes 0.xxx mAP@0.5". Axes [0,1]^2,
/// x "Recall", y "Precision", title "Precision-Recall Curve", legend outside on the right;
/// 1500 x 1000 px. Throws engine::ShapeError on inconsistent sizes (or C == 0), engine::IoError
/// naming out_png when it cannot be written.
void plot_pr_curve(const engine::Tensor& px, const engine::Tensor& py, const engine::Tensor& ap50,
                   const std::vector<std::string>& names, const std::string& out_png);

/// F1_curve.png / P_curve.png / R_curve.png (utils/metrics.py plot_mc_curve). px: [P]
/// confidence grid, py: [C, P] metric per class vs confidence, names: C names (or empty). The
/// mean over classes is smoothed with the official box filter (smooth(y, 0.05): odd width
/// round(0.1 * P) // 2 + 1, edges padded with the end values) and labelled
/// "all classes <max:.2f> at <px[argmax]:.3f>". Title "<ylabel>-Confidence Curve", axes [0,1]^2.
/// Same errors as plot_pr_curve.
void plot_mc_curve(const engine::Tensor& px, const engine::Tensor& py, const std::vector<std::string>& names,
                   const std::string& xlabel, const std::string& ylabel, const std::string& out_png);

/// The official smooth(y, f=0.05) box filter of the F1 curve: [n] -> [n] (n >= 1).
std::vector<double> smooth_box(const std::vector<double>& y, double f = 0.05);
/// scipy.ndimage.gaussian_filter1d(y, sigma) with mode 'reflect' and truncate 4.0: [n] -> [n].
std::vector<double> gaussian_filter1d(const std::vector<double>& y, double sigma);

/// labels.jpg (utils/plots.py plot_labels), 1600 x 1600 px, 2 x 2 panels: instances per class
/// (bars coloured with the class palette, names as ticks when 0 < names.size() < 30), the first
/// 1000 boxes drawn at the centre of a square (outline in the class colour), and 50 x 50
/// 2-D histograms of box centres (x, y) and sizes (width, height) in the 'Blues' map saturating
/// at the count below which 90% of the mass lies (seaborn pmax=0.9). classes: [n] any numeric
/// dtype (class indices), boxes: [n, 4] xywh normalised to [0,1]. n == 0 is allowed (empty
/// panels). Throws engine::ShapeError on mismatched n or a box tensor that is not [n, 4],
/// engine::IoError naming out_jpg when it cannot be written.
void plot_labels(const engine::Tensor& classes, const engine::Tensor& boxes, const std::vector<std::string>& names,
                 const std::string& out_jpg);

/// train_batch*.jpg / val_batch*_{labels,pred}.jpg (utils/plots.py plot_images). images:
/// [B, 3, H, W] RGB, U8 (0-255) or floating (0-1 when max <= 1, else 0-255), any device; at most
/// `max_subplots` (16) are tiled in an ns x ns grid (ns = ceil(sqrt(B)); column-major as
/// official), downscaled so the mosaic is at most `max_size` (1920) px. targets: [n, 6]
/// (image index, class, cx, cy, w, h) or [n, 7] with a trailing confidence (predictions: only
/// conf > 0.25 drawn, label "<name> <conf:.1f>"); boxes are normalised when all coordinates are
/// <= 1.01, else in pixels of the input image. `predictions` (optional, [m, 7]) are drawn on top
/// the same way. Boxes use the official class palette with a filled label box (white text).
/// paths (optional): file names shown at each tile's top-left corner. Throws engine::ShapeError
/// on bad shapes or dtypes, engine::IoError naming out_jpg when it cannot be written.
void plot_images(const engine::Tensor& images, const engine::Tensor& targets, const std::vector<std::string>& names,
                 const std::string& out_jpg, const engine::Tensor& predictions = engine::Tensor(),
                 const std::vector<std::string>& paths = {}, int max_size = 1920, int max_subplots = 16);

/// grad_norm.png from grad_norm.csv (io/grad_norm_log.h; not an official figure): the total
/// gradient norm of every optimizer step before clipping (thin line, x = epoch + (batch + 1) / nb),
/// the mean of each epoch (thick steps over [epoch, epoch + 1)) and the clip threshold `max_norm`
/// (dashed red line; steps above it were scaled down to it). Log-scale y axis (norms span decades
/// early in training); the title counts the steps above the threshold. 1600 x 700 px. Non-finite
/// norms are counted in the title and left out of the lines. A missing or empty CSV gives a frame
/// with "no data". Throws engine::IoError naming the path when the CSV is malformed or out_png
/// cannot be written. Deterministic.
void plot_grad_norm(const std::string& grad_norm_csv_path, const std::string& out_png, double max_norm = 10.0);

/// One feature-map grid as the official utils/plots.py feature_visualization draws it for a
/// stage: the first min(n, C) channels of image 0 of x [B, C, H, W] (any floating dtype, any
/// device), 8 per row (ceil(n / 8) rows), each min-max normalised on its own and coloured with
/// matplotlib's default 'viridis' map (imshow), tiles separated by a white gap, no axes. Tiles
/// are scaled (nearest up, area down) to 64-256 px on their longer side. Throws
/// engine::ShapeError when x is not 4-D with C, H, W >= 1 or n < 1, engine::IoError naming
/// out_png when it cannot be written. Deterministic.
void plot_feature_maps(const engine::Tensor& x, const std::string& out_png, int n = 32);

}  // namespace io
