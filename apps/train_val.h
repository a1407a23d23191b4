// Validation during training (official train_dual.py -> val_dual.run on the EMA model): val
// losses, NMS and the mAP metrics of ops/metrics. Internal to `yolov9 train`; the full
// `yolov9 val` command (plots, per-class tables, JSON) is apps/val.cpp's job.
#pragma once
#include <cstdint>

#include "graph/model.h"
#include "io/loader.h"
#include "ops/yolo_loss.h"

namespace apps {

/// Numbers of one validation pass (the results.csv metrics/val columns).
struct TrainValResult {
  double p = 0, r = 0, map50 = 0, map = 0;  ///< mean precision, recall, mAP@0.5, mAP@0.5:0.95
  double box = 0, cls = 0, dfl = 0;         ///< val losses, mean over batches (official loss/len(dataloader))
  int64_t images = 0, instances = 0;
  double fitness() const { return 0.1 * map50 + 0.9 * map; }  ///< official utils/metrics.py fitness
};

/// Runs `model` (switched to eval mode, restored to training mode after) over every batch of
/// `loader` (epoch 0; rect letterboxed batches without augmentation) under NoGradGuard: val loss
/// on the raw head maps with `loss_cfg`, NMS on the main branch (conf 0.001, IoU 0.7,
/// multi-label, max_det 300, class-agnostic with single_cls) and DetectionMetrics.
/// Deviation: boxes are compared in letterboxed-input pixels instead of original-image pixels
/// (IoU is invariant to the letterbox's uniform scale and shift; only edge clipping differs).
/// Errors: as the model forward, the loss and NMS. Deterministic on the CPU.
TrainValResult validate_model(graph::Model& model, io::DataLoader& loader, const ops::YoloLossConfig& loss_cfg,
                              int64_t nc, bool single_cls);

}  // namespace apps
