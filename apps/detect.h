// Registration of `yolov9 detect` (official detect_dual.py flags; apps/detect.cpp).
#pragma once
#include <CLI/CLI.hpp>

namespace apps {
/// Adds the `detect` subcommand (every detect_dual.py option; sources: image, folder, glob, .txt
/// list, video). Its runner returns 0, or 1 when any source could not be read (the rest are
/// still processed), 2 for usage errors.
void register_detect(CLI::App& app);
}  // namespace apps
