// Checks of command-line values shared by `yolov9 train`, `val`, `detect` and `export`: the
// bounds of the numeric options and the --device value (official select_device in
// utils/torch_utils.py, WongKinYiu/yolov9 5b1ea9a: cpu, or CUDA device indices).
#pragma once
#include <cstdint>
#include <string>

#include "engine/device.h"

namespace training {

/// Bounds of the numeric options: the command line and the Trainer refuse values outside them,
/// naming the option (an absurd --epochs must not wrap around to a negative int).
inline constexpr int64_t kMaxEpochs = 1000000;
inline constexpr int64_t kMaxBatchSize = 65536;
inline constexpr int64_t kMaxImgSize = 32768;  ///< pixels

/// Checks and normalises a --device value as the official select_device does: trimmed, lower
/// case, "cuda:" and "none" removed. Returns "" (default), "cpu", CUDA indices "0" / "0,1,2,3",
/// or a list of CPU ranks "cpu:0,cpu:1" (`yolov9 train` spawns one process per item; a single
/// "cpu:k", what each spawned rank gets, is returned as "cpu").
/// Errors: engine::ConfigError naming the value when it is anything else ("foo", "0,,1", "-1",
/// "mps": Apple GPUs are not available in this build), and, as the official "Invalid CUDA
/// '--device 0' requested", when a CUDA index cannot be used, with the cause
/// (engine::cuda_unavailable_reason: no CUDA backend in the build, no driver, no device, bad index).
std::string check_device_option(const std::string& device);

/// The device one process runs on for a value returned by check_device_option (official
/// select_device): "" picks cuda:0 when a CUDA device is usable and the CPU otherwise; "cpu" and
/// CPU ranks give the CPU; CUDA indices "i" or "i,j,..." give cuda:i (the first listed: one
/// process uses one device; `yolov9 train` spawns one rank per listed device). Throws nothing
/// for a checked value (an unchecked one may throw std::invalid_argument from std::stoi).
engine::Device selected_device(const std::string& checked);

}  // namespace training
