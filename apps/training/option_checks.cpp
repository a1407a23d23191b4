// Command-line value checks (apps/training/option_checks.h).
#include "apps/training/option_checks.h"

#include <algorithm>
#include <cctype>

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
  bool ok = d.front() != ',' && d.back() != ',' && d.find(",,") == std::string::npos && d.size() <= 64;
  for (char c : d) ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == ',');
  Y9_CHECK_T(engine::ConfigError, ok, "--device '", device,
             "' is not a device: use --device cpu, or CUDA device indices such as --device 0 or --device 0,1,2,3");
  return d;
}

}  // namespace training
