// `yolov9 synth`: writes a small synthetic detection dataset (io/synth.h) for smoke tests.
#pragma once
#include <CLI/CLI.hpp>

namespace apps {
/// Adds the `synth` subcommand (--out, --n-train, --n-val, --img, --seed, --classes).
void register_synth(CLI::App& app);
}  // namespace apps
