// Shared helpers of the benchmarks: environment settings, the model YAML folder, and
// run_official, which runs a script of bench/official/ against the official PyTorch YOLOv9 (folder in env
// YOLOV9_OFFICIAL, interpreter /usr/bin/python3 or env YOLOV9_PYTHON) and returns the JSON object
// it prints on its last line; std::nullopt when the variable is unset or the script fails, so a
// benchmark can skip its baseline column.
#pragma once
#include <array>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace bench {

/// The value of environment variable `name`, or `fallback` when it is unset or empty.
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

/// The model YAML folder: $YOLOV9_CONFIGS, else configs/models under the source tree (when the
/// build defines Y9_BENCH_SOURCE_DIR) or under the current directory.
inline std::string config_dir() {
  if (const char* e = std::getenv("YOLOV9_CONFIGS"); e && *e) return e;
#ifdef Y9_BENCH_SOURCE_DIR
  return std::string(Y9_BENCH_SOURCE_DIR) + "/configs/models";
#else
  return "configs/models";
#endif
}

inline std::optional<nlohmann::json> run_official(const std::string& script, const std::string& args) {
  const char* root = std::getenv("YOLOV9_OFFICIAL");
  if (!root || !*root) return std::nullopt;
  const char* py = std::getenv("YOLOV9_PYTHON");
  std::string cmd = std::string(py && *py ? py : "/usr/bin/python3") + " " + Y9_BENCH_SOURCE_DIR +
                    "/bench/official/" + script + " " + args + " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return std::nullopt;
  std::string out, last;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), f)) out += buf.data();
  if (pclose(f) != 0) return std::nullopt;
  size_t end = out.find_last_not_of("\n");
  if (end == std::string::npos) return std::nullopt;
  size_t start = out.rfind('\n', end);
  last = out.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
  try {
    return nlohmann::json::parse(last);
  } catch (...) {
    return std::nullopt;
  }
}

/// A positive integer (1..100000) from environment variable `name`, else `fallback`; a bad value
/// ends the program with a message naming `program`, the variable and the value (benchmarks read
/// these at registration, before main).
inline int positive_env(const char* program, const char* name, const char* fallback) {
  const std::string s = env_or(name, fallback);
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1 || v > 100000) {
    std::fprintf(stderr, "%s: %s must be an integer in 1..100000, got '%s'\n", program, name, s.c_str());
    std::exit(1);
  }
  return static_cast<int>(v);
}

}  // namespace bench
