// CpuThreadGovernor (apps/training/cpu_threads.h).
#include "apps/training/cpu_threads.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/error.h"

namespace training {

namespace fs = std::filesystem;

CpuThreadGovernor::CpuThreadGovernor(int max_threads, int cpus)
    : max_threads_(std::max(1, max_threads)), cpus_(std::max(1, cpus)), threads_(max_threads_) {}

int CpuThreadGovernor::observe(double others) {
  // The median of the last 3 samples (each at most cpus) enters the average, so one burst never does.
  recent_[next_] = std::clamp(others, 0.0, static_cast<double>(cpus_));
  next_ = (next_ + 1) % 3;
  double m[3] = {recent_[0], recent_[1], recent_[2]};
  std::sort(m, m + 3);
  load_ = 0.7 * load_ + 0.3 * m[1];
  const int want = std::clamp(static_cast<int>(std::lround(cpus_ - load_)), 1, max_threads_);
  if (want == threads_) {
    streak_ = 0;
    return threads_;
  }
  streak_ = want == pending_ ? streak_ + 1 : 1;
  pending_ = want;
  if (streak_ >= 3) {
    threads_ = want;
    streak_ = 0;
  }
  return threads_;
}

double CpuThreadGovernor::other_runnable_tasks() {
  std::ifstream st("/proc/stat");
  std::string line;
  long running = -1;
  while (std::getline(st, line))
    if (line.rfind("procs_running ", 0) == 0) running = std::strtol(line.c_str() + 14, nullptr, 10);
  if (running < 0) return -1;
  long ours = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/self/task", ec), end; !ec && it != end; it.increment(ec)) {
    std::ifstream ts(it->path() / "stat");
    std::string s;
    std::getline(ts, s);
    // pid (comm) state ...: the state follows the last ')' (comm may hold spaces and parens).
    const size_t k = s.rfind(')');
    if (k != std::string::npos && k + 2 < s.size() && s[k + 2] == 'R') ++ours;
  }
  if (ec) return -1;
  return static_cast<double>(std::max(0L, running - ours));
}

int CpuThreadGovernor::update() {
  const double others = other_runnable_tasks();
  const int before = threads_;
  observe(others < 0 ? 0.0 : others);
  if (threads_ != before) omp_set_num_threads(threads_);
  return threads_;
}

void check_cpu_threads_option(const std::string& value, bool deterministic) {
  if (value.empty()) return;
  if (value == "auto") {
    Y9_CHECK_T(engine::ConfigError, !deterministic,
               "--cpu-threads auto changes the thread count with the machine's load, which changes the float "
               "rounding of the reductions: it cannot be combined with --deterministic");
    return;
  }
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  Y9_CHECK_T(engine::ConfigError, *end == '\0' && n >= 1 && n <= 1024,
             "--cpu-threads must be auto or an integer in 1..1024 (got '", value, "')");
}

}  // namespace training
