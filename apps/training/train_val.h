// Validation during training (official train_dual.py -> val_dual.run on the EMA model): the
// shared validation loop of apps/training/evaluator.h (rect batches, NMS, metrics in original-image
// pixels, the official table) plus the val losses on the eval-mode head maps.
#pragma once
#include <cstdint>
#include <memory>

#include "apps/training/evaluator.h"
#include "graph/model.h"
#include "io/augment.h"
#include "ops/yolo_loss.h"

namespace training {

/// Numbers of one validation pass (the results.csv metrics/val columns).
struct TrainValResult {
  double p = 0, r = 0, map50 = 0, map = 0;  ///< mean precision, recall, mAP@0.5, mAP@0.5:0.95
  double box = 0, cls = 0, dfl = 0;         ///< val losses, mean over batches (official loss/len(dataloader))
  int64_t images = 0, instances = 0;
  int64_t batches = 0;                      ///< validation batches run (the val losses' divisor)
  double fitness() const { return 0.1 * map50 + 0.9 * map; }  ///< official utils/metrics.py fitness
};

/// Runs `model` (switched to eval mode, restored after) over `ds` through run_validation with
/// `opts` (the caller sets training = true, batch size, workers, names, single_cls, plots) and,
/// on each batch's eval-mode raw head maps, the loss `loss_cfg` (official val_dual.py:
/// loss += compute_loss(train_out, targets)[1]). Prints the official table when opts.print.
/// Errors: as the model forward, the loss, NMS and run_validation. Deterministic on the CPU.
TrainValResult validate_model(graph::Model& model, std::shared_ptr<const io::AugmentedDataset> ds,
                              const ops::YoloLossConfig& loss_cfg, const ValOptions& opts);

}  // namespace training
