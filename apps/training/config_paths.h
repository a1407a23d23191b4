// Where the yolov9 commands find config files named on the command line (--cfg, --hyp, --data).
#pragma once
#include <string>

namespace training {

/// Finds a config file: `given` as a path, else by file name (".yaml" appended when missing)
/// under configs/<sub>/ of the working directory and of the source tree next to the program
/// (build/../configs), so the official "models/detect/yolov9-c.yaml" and
/// "data/hyps/hyp.scratch-high.yaml" resolve. Returns an absolute path. Throws engine::IoError
/// naming every place searched and the shipped files of that kind; engine::ConfigError when
/// `given` is empty. `what` names the option in messages ("model config (--cfg)").
std::string resolve_config(const std::string& given, const std::string& sub, const char* what);

}  // namespace training
