// Registration of `yolov9 val` (official val_dual.py flags; apps/val.cpp).
#pragma once
#include <CLI/CLI.hpp>

namespace apps {
/// Adds the `val` subcommand (every val_dual.py option; --task val/test/speed). Its runner
/// prints the official table and speed line and returns 0, or non-zero on a bad input.
void register_val(CLI::App& app);
}  // namespace apps
