// Command-line value checks (apps/training/option_checks.h).
#include "apps/training/option_checks.h"

#include <algorithm>
#include <cctype>

#include <vector>

#include "engine/device.h"
#include "engine/error.h"

namespace training {

std::string check_device_option(const std::string& device) {
  std::string d;
  for (char c : device)
    if (!std::isspace(static_cast<unsigned char>(c))) d += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const std::string drop : {"cuda:", "none"})
    for (size_t at; (at = d.find(drop)) != std::string::npos;) d.erase(at, drop.size());
  if (d.empty() || d == "cpu") return d;
  Y9_CHECK_T(engine::ConfigError, d != "mps", "--device mps: Apple GPUs are not available in this build; use --device cpu");
  bool syntax = d.front() != ',' && d.back() != ',' && d.find(",,") == std::string::npos && d.size() <= 128;
  // CPU ranks: "cpu:0,cpu:1,.." (every item cpu:<k>); one item is a rank of such a run.
  const bool cpu_ranks = d.compare(0, 4, "cpu:") == 0;
  std::vector<int> cuda_indices;
  for (size_t i = 0; syntax && i < d.size();) {
    const size_t j = std::min(d.find(',', i), d.size());
    std::string item = d.substr(i, j - i);
    if (cpu_ranks) {
      if (item.compare(0, 4, "cpu:") != 0) syntax = false;
      item.erase(0, 4);
    }
    syntax = syntax && !item.empty() && item.size() <= 4 &&
             std::all_of(item.begin(), item.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (syntax && !cpu_ranks) cuda_indices.push_back(std::stoi(item));
    i = j + 1;
  }
  Y9_CHECK_T(engine::ConfigError, syntax, "--device '", device,
             "' is not a device: use --device cpu, CUDA device indices such as --device 0 or --device 0,1,2,3, "
             "or CPU ranks such as --device cpu:0,cpu:1");
  if (cpu_ranks) return d.find(',') == std::string::npos ? std::string("cpu") : d;
  // Official select_device: "Invalid CUDA '--device 0' requested, use '--device cpu' or pass valid
  // CUDA device(s)"; we also say why.
  for (int idx : cuda_indices) {
    const std::string why = engine::cuda_unavailable_reason(idx);
    Y9_CHECK_T(engine::ConfigError, why.empty(), "Invalid CUDA '--device ", device, "' requested: ", why,
               ". Use '--device cpu' (or leave --device out) to run on the CPU, or pass valid CUDA device(s)");
  }
  return d;
}

engine::Device selected_device(const std::string& checked) {
  if (checked.empty()) return engine::cuda_unavailable_reason(0).empty() ? engine::Device::cuda(0) : engine::Device::cpu();
  if (checked.compare(0, 3, "cpu") == 0) return engine::Device::cpu();
  return engine::Device::cuda(std::stoi(checked.substr(0, checked.find(','))));
}

}  // namespace training
