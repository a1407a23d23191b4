// `yolov9 info`: model summary (model issue) and --self-check (a quick numeric sanity run).
#pragma once
#include <CLI/CLI.hpp>

namespace apps {
void register_info(CLI::App& app);
/// Runs a small forward/backward through the engine and checks it against closed forms.
/// Returns 0 and prints "self-check passed" on success.
int self_check();
}  // namespace apps
