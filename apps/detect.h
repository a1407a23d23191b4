// Registration of `yolov9 detect` (official detect_dual.py flags; apps/detect.cpp).
#pragma once
#include <CLI/CLI.hpp>

namespace apps {
void register_detect(CLI::App& app);
}  // namespace apps
