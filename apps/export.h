// `yolov9 export`: converts trained weights for inference (model issue): PGI re-parameterisation
// of a dual yolov9-X model into gelan-X (tools/reparameterization.ipynb) and Conv+BN / RepConvN
// fusion (models/yolo.py BaseModel.fuse).
#pragma once
#include <CLI/CLI.hpp>

namespace apps {
/// Adds the `export` subcommand (--weights, --cfg, --reparam, --gelan-cfg, --fuse, --nc, --out).
void register_export(CLI::App& app);
}  // namespace apps
