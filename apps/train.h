// `yolov9 train`: the official train_dual.py / train.py training driver (shared/spec/train.md):
// options, run directory, checkpoints and resume, the epoch loop with warm-up, accumulation,
// clipping, EMA, per-epoch validation on the EMA weights, results.csv and plots.
#pragma once
#include <CLI/CLI.hpp>

namespace apps {
/// Adds the `train` subcommand with every train_dual.py option (spec train.md section 1) plus
/// --deterministic and --fp32-init.
void register_train(CLI::App& app);
}  // namespace apps
