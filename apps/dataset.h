// `yolov9 dataset`: dataset check and summary (data issue).
#pragma once
#include <CLI/CLI.hpp>

namespace apps {
/// Adds the `dataset` subcommand (--data, --img, --save-mosaics, --json).
void register_dataset(CLI::App& app);
}  // namespace apps
