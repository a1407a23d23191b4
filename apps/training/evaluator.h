// Validation as a library function (official val_dual.py / val.py `run`, WongKinYiu/yolov9
// 5b1ea9a; shared/spec/eval.md sections 3-5): letterboxed rect batches, NMS, box mapping to the
// original image, mAP statistics, confusion matrix, per-class table, speed line, plots, YOLO txt
// labels and COCO JSON. Used by `yolov9 val` and by the training loop (EMA model each epoch).
// The header is graph-free: the model enters as a Predictor (or through the graph::Model overload).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "engine/tensor.h"
#include "apps/training/predictor.h"
#include "io/loader.h"
#include "ops/metrics.h"

namespace graph {
class Model;
}

namespace training {


/// Options of run_validation (official val_dual.py run() arguments).
struct ValOptions {
  int batch_size = 32;
  int workers = 8;
  double conf_thres = 0.001;
  double iou_thres = 0.7;
  int64_t max_det = 300;
  bool single_cls = false;   ///< predicted classes set to 0, agnostic NMS
  bool verbose = false;      ///< per-class rows even for nc >= 50 / during training
  bool training = false;     ///< called from training: no speed line, per-class rows only if verbose
  bool save_txt = false;     ///< labels/<stem>.txt: class cx cy w h [conf], normalised, %g
  bool save_hybrid = false;  ///< ground truth appended to NMS input (inflated mAP; implies save_txt)
  bool save_conf = false;
  bool save_json = false;    ///< COCO detections <json_stem>_predictions.json
  bool plots = true;         ///< confusion matrix, curves, val_batch{0,1,2}_{labels,pred}.jpg
  bool print = true;         ///< print the table (and the speed line when !training)
  std::string save_dir;      ///< outputs folder (created); empty = no files at all
  std::string json_stem = "yolo";  ///< weights file stem for the JSON name
  bool is_coco = false;      ///< category ids through coco80_to_coco91; COCO eval restricted to these images
  std::string anno_json;     ///< with save_json: COCO annotations scored by pycocotools (python3), whose
                             ///< AP and AP50 replace mAP50-95 and mAP50 (official); empty = skip
  std::vector<std::string> names;  ///< class names (index = class); missing names print the index
  std::string task = "val";  ///< split name used in warnings
  engine::Device device = engine::Device::cpu();  ///< where images go before the predictor
  /// validate_model (apps/training/train_val.h) only: F16/BF16 runs the forward under
  /// ops::AutocastGuard (training on CUDA with AMP; official val during training with half=amp),
  /// the outputs cast to F32 before the loss and NMS; F32 (default): no autocast.
  engine::DType autocast = engine::DType::F32;
  /// Data-parallel validation (`train --val-distributed`): called after the last batch with this
  /// shard's statistics; it must make them the statistics of every shard in image order (an
  /// all-gather, then DetectionMetrics::merge_serialized). Empty: one process sees every image.
  std::function<void(ops::DetectionMetrics&)> merge_stats;
};

/// What run_validation returns.
struct ValResult {
  ops::ValMetrics metrics;                 ///< mp, mr, mAP50, mAP50-95, fitness, per-class maps
  double pre_ms = 0, inf_ms = 0, nms_ms = 0;  ///< per image (official dt / seen * 1e3)
  int64_t seen = 0;                        ///< images evaluated
  int64_t instances = 0;                   ///< targets evaluated
  std::string table;                       ///< the printed table (header, all row, class rows)
  std::string json_path;                   ///< written COCO JSON (empty when !save_json)
  int64_t label_files = 0;                 ///< txt files written with save_txt
  bool coco_evaluated = false;             ///< pycocotools ran and replaced map / map50
  engine::Tensor confusion;                ///< [(nc+1), (nc+1)] F64 confusion matrix
};

/// The official COCO 80 -> 91 category map (utils/general.py coco80_to_coco91_class): 80 ids.
const std::vector<int>& coco80_to_coco91();

/// Official is_coco rule: the data.yaml `val` entry is a single path ending in coco/val2017.txt.
bool is_coco_val(const std::vector<std::string>& val_entries);

/// Official image_id rule for the JSON: the file stem as an integer when it is all digits,
/// else the stem string.
nlohmann::json coco_image_id(const std::string& image_path);

/// save_one_json: detections [N, 6] (x1, y1, x2, y2, conf, cls) in original-image pixels ->
/// appended to `out` as {image_id, category_id, bbox [x_min, y_min, w, h] rounded to 3
/// decimals, score rounded to 5}; category_id = coco80_to_coco91()[cls] when is_coco else cls.
/// Throws engine::ShapeError on a bad shape, engine::Error on a class outside the COCO map.
void append_coco_json(const engine::Tensor& detections, const std::string& image_path, bool is_coco,
                      nlohmann::json& out);

/// save_one_txt lines (official %g format, NMS order): detections [N, 6] in original-image
/// pixels (h0 x w0) -> "cls cx cy w h[ conf]\n" per row, box normalised by w0/h0.
std::string yolo_txt_lines(const engine::Tensor& detections, int h0, int w0, bool save_conf);

/// The official table: header ('%22s' + '%11s' * 6), the `all` row ('%22s%11i%11i' + '%11.3g' *
/// 4) and, when `per_class`, one row per evaluated class (ap_class order).
std::string format_val_table(const ops::ValMetrics& m, int64_t seen, const std::vector<std::string>& names,
                             bool per_class);

/// Validation dataset of a split (official create_dataloader for val): scan `entries`, rect
/// batches with `pad` (0.5 stand-alone and in training, 0 with rect = false for --task speed),
/// no augmentation. nc checks class ids; single_cls maps every class to 0; min_items filters.
/// A non-empty `prefix` ("val: ") prints the scan summary line and findings on stdout.
/// Throws engine::IoError when the split has no usable image (message names the paths).
std::shared_ptr<io::AugmentedDataset> make_val_dataset(const std::vector<std::string>& entries, int img_size,
                                                       int batch_size, bool rect, double pad, int nc,
                                                       bool single_cls, int min_items, const std::string& prefix);

/// Runs pycocotools (python3 subprocess) on `anno_json` and `pred_json`; img_ids restricts the
/// evaluation (empty = all). Returns {AP@[.5:.95], AP@.5} and prints COCOeval's summary on
/// stdout. Throws engine::Error with the reason (python3 or pycocotools missing, bad files).
std::pair<double, double> pycocotools_eval(const std::string& anno_json, const std::string& pred_json,
                                           const std::vector<nlohmann::json>& img_ids);

/// Official scale_boxes with ratio_pad = ((gain, _), (pad_w, pad_h)): boxes [N, >=4] F32 CPU
/// contiguous, columns 0..3 xyxy in letterboxed pixels, modified in place to original-image
/// pixels (minus pad, divided by gain, clipped to [0, w0] x [0, h0]).
void scale_boxes_inplace(engine::Tensor& boxes, double gain, double pad_w, double pad_h, int h0, int w0);

/// The official val_dual.py loop over `ds` (built by make_val_dataset; batch size of its rect
/// shapes should equal opts.batch_size): NMS (multi_label, agnostic = single_cls), metrics in
/// original-image pixels (ratio_pad from the loader), confusion matrix, outputs into
/// opts.save_dir. nc = opts.single_cls ? 1 : max(names.size(), label classes + 1).
/// Throws engine::Error from the predictor, NMS or metrics; engine::IoError naming a file that
/// cannot be read or written. Deterministic for a deterministic predictor (timings aside).
ValResult run_validation(const Predictor& predictor, std::shared_ptr<const io::AugmentedDataset> ds,
                         const ValOptions& opts);

/// Convenience: run_validation(model_predictor(model), ds, opts).
ValResult run_validation(graph::Model& model, std::shared_ptr<const io::AugmentedDataset> ds,
                         const ValOptions& opts);


}  // namespace training
