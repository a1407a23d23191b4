// Run-folder and output-file numbering (official utils/general.py increment_path): the one place
// the engine numbers runs/train/exp, exp2, ... and detect's crop files x.jpg, x2.jpg, ...
#pragma once
#include <string>

namespace io {

/// Official increment_path(path, exist_ok, sep='', mkdir): `path` itself when it does not exist
/// or `exist_ok`; otherwise the first free path{n} for n = 2, 3, ... (for an existing regular
/// file the number goes before the suffix: x.jpg -> x2.jpg). With `mkdir` the resulting folder is
/// created (with parents). Throws engine::IoError naming the folder when it cannot be created.
std::string increment_path(const std::string& path, bool exist_ok = false, bool mkdir = false);

}  // namespace io
