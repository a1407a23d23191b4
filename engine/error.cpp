// Error formatting: message plus the failing expression and its source location.
#include "engine/error.h"

#include <algorithm>
#include <cstdlib>

namespace engine {

namespace {
std::string format(const std::string& msg, const char* expr, const char* file, int line) {
  std::string s = msg;
  s += " [";
  if (expr && *expr) {
    s += expr;
    s += " at ";
  }
  s += file ? file : "?";
  s += ":";
  s += std::to_string(line);
  s += "]";
  return s;
}
}  // namespace

Error::Error(const std::string& msg, const char* expr, const char* file, int line)
    : std::runtime_error(format(msg, expr, file, line)), message_(msg), expr_(expr ? expr : ""), file_(file),
      line_(line) {}

std::string Error::where() const {
  const std::string w = what();
  return w.substr(std::min(w.size(), message_.size() + 1));
}

bool debug_messages() {
  const char* d = std::getenv("Y9_DEBUG");
  return d != nullptr && *d != '\0' && std::string(d) != "0";
}

}  // namespace engine
