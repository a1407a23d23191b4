// printf-style formatting into a std::string, for the console tables of the task drivers.
#pragma once
#include <cstdarg>
#include <cstdio>
#include <string>

namespace training {

/// Formats like printf; output longer than 1023 characters is truncated.
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

}  // namespace training
