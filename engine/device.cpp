// Device parsing.
#include "engine/device.h"

#include <cctype>

#include "engine/error.h"

namespace engine {

Device Device::parse(const std::string& s) {
  if (s.empty() || s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  std::string idx = s.rfind("cuda:", 0) == 0 ? s.substr(5) : s;
  bool digits = !idx.empty();
  for (char c : idx) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  Y9_CHECK(digits, "invalid device '", s, "': expected cpu, cuda, cuda:N or N");
  return cuda(std::stoi(idx));
}

}  // namespace engine
