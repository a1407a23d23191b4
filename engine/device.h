// Where a tensor lives: the CPU or CUDA device n.
#pragma once
#include <string>

namespace engine {

enum class DeviceType : uint8_t { CPU, CUDA };

/// A device: CPU (index ignored, 0) or CUDA:index.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && (type == DeviceType::CPU || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  /// "cpu" or "cuda:0".
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  /// Parses "cpu", "cuda", "cuda:1" or a bare index "0" (official --device convention).
  static Device parse(const std::string& s);
};

/// True when the CUDA backend is compiled in.
bool cuda_compiled();
/// Number of visible CUDA devices; 0 when none, when no driver is present or on any CUDA error.
int cuda_device_count();
/// Why CUDA device `index` cannot be used, or "" when it can: the build has no CUDA backend, no
/// driver (or one older than the runtime), no device, or `index` beyond the visible devices (the
/// count and CUDA_VISIBLE_DEVICES are named). For the --device checks of the commands.
std::string cuda_unavailable_reason(int index);

}  // namespace engine
