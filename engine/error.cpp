// Error formatting: message plus the failing expression and its source location.
#include "engine/error.h"

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
    : std::runtime_error(format(msg, expr, file, line)), message_(msg), file_(file), line_(line) {}

}  // namespace engine
