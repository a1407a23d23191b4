// Error hierarchy and checking macros of the engine. Library code throws, never exits
// (guide/style.md 3.5). Every error carries the failing expression, file:line and context.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace engine {

/// Root of every exception the engine throws. what() = "<message> [<expr> at <file>:<line>]".
/// message() is what a user is shown: what is wrong with which input. The failing check and the
/// source location (where()) are for developers: `yolov9` prints them only with Y9_DEBUG=1.
class Error : public std::runtime_error {
 public:
  Error(const std::string& msg, const char* expr, const char* file, int line);
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }
  /// The failing check expression ("" for Y9_THROW).
  const std::string& expr() const { return expr_; }
  /// "[<expr> at <file>:<line>]", the part of what() after the message.
  std::string where() const;

 private:
  std::string message_;
  std::string expr_;
  const char* file_;
  int line_;
};

/// A tensor of the wrong shape, dtype or device for an op (message names op and shapes).
class ShapeError : public Error { using Error::Error; };
/// Bad configuration: YAML, hyperparameters, command-line values.
class ConfigError : public Error { using Error::Error; };
/// File-system or decoding failure; the message names the path.
class IoError : public Error { using Error::Error; };
/// Broken internal invariant (Y9_ASSERT); a bug in the engine, never the user's fault.
class InternalError : public Error { using Error::Error; };
/// CUDA runtime failure (cudaGetErrorName + cudaGetErrorString in the message).
class CudaError : public Error { using Error::Error; };
/// A device allocation that failed even after the caching allocator emptied its cache; the
/// message says how much was asked, how much the process holds and what to lower (--batch).
class OutOfMemoryError : public CudaError { using CudaError::CudaError; };
class CudnnError : public Error { using Error::Error; };
class CublasError : public Error { using Error::Error; };
class NcclError : public Error { using Error::Error; };

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  append(os, args...);
  return os.str();
}
}  // namespace detail

/// True when Y9_DEBUG is set to anything but "" and "0": error reports then add the failing
/// check and its source location (Error::what()) to the user's message (Error::message()).
bool debug_messages();

}  // namespace engine

/// Throws `ExcType` with the streamed message parts when `cond` is false.
#define Y9_CHECK_T(ExcType, cond, ...)                                                         \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      throw ExcType(::engine::detail::concat(__VA_ARGS__), #cond, __FILE__, __LINE__);       \
    }                                                                                          \
  } while (0)

/// Validates user input; throws engine::Error with the message parts.
#define Y9_CHECK(cond, ...) Y9_CHECK_T(::engine::Error, cond, __VA_ARGS__)
/// Validates shapes/dtypes/devices of op arguments; throws engine::ShapeError.
#define Y9_CHECK_SHAPE(cond, ...) Y9_CHECK_T(::engine::ShapeError, cond, __VA_ARGS__)
/// Internal invariant, on in release builds; throws engine::InternalError.
#define Y9_ASSERT(cond, ...) Y9_CHECK_T(::engine::InternalError, cond, "internal invariant failed ", ##__VA_ARGS__)
/// Unconditional throw.
#define Y9_THROW(ExcType, ...) throw ExcType(::engine::detail::concat(__VA_ARGS__), "", __FILE__, __LINE__)
