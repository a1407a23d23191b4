// Checks of command-line values shared by `yolov9 train`, `val`, `detect` and `export`: the
// bounds of the numeric options and the --device value (official select_device in
// utils/torch_utils.py, WongKinYiu/yolov9 5b1ea9a: cpu, or CUDA device indices).
#pragma once
#include <cstdint>
#include <string>

namespace training {

/// Bounds of the numeric options: the command line and the Trainer refuse values outside them,
/// naming the option (an absurd --epochs must not wrap around to a negative int).
inline constexpr int64_t kMaxEpochs = 1000000;
inline constexpr int64_t kMaxBatchSize = 65536;
inline constexpr int64_t kMaxImgSize = 32768;  ///< pixels

/// Checks and normalises a --device value as the official select_device does: trimmed, lower
/// case, "cuda:" and "none" removed. Returns "" (default), "cpu", or CUDA indices "0" / "0,1,2,3".
/// Errors: engine::ConfigError naming the value when it is anything else ("foo", "0,,1", "-1",
/// "mps": Apple GPUs are not available in this build).
std::string check_device_option(const std::string& device);

}  // namespace training
