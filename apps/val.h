// Registration of `yolov9 val` (official val_dual.py flags; apps/val.cpp).
#pragma once
#include <CLI/CLI.hpp>

namespace apps {
void register_val(CLI::App& app);
}  // namespace apps
