// Chrome-trace recorder (apps/training/trace.h).
#include "apps/training/trace.h"

#include <cstdio>

#include "engine/error.h"
#include "io/atomic_file.h"

namespace training {

Tracer::Tracer(int pid) : pid_(pid), t0_(std::chrono::steady_clock::now()) {}

int64_t Tracer::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_).count();
}

void Tracer::complete(const std::string& name, const std::string& track, int64_t ts_us, int64_t dur_us,
                      nlohmann::json args) {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(mu_);
  size_t tid = 0;
  while (tid < tracks_.size() && tracks_[tid] != track) ++tid;
  if (tid == tracks_.size()) {
    tracks_.push_back(track);
    events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid_}, {"tid", tid + 1},
                       {"args", {{"name", track}}}});
  }
  nlohmann::json e = {{"name", name}, {"cat", track}, {"ph", "X"}, {"ts", ts_us},
                      {"dur", std::max<int64_t>(dur_us, 1)}, {"pid", pid_}, {"tid", tid + 1}};
  if (!args.empty()) e["args"] = std::move(args);
  events_.push_back(std::move(e));
}

size_t Tracer::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

void Tracer::write(const std::string& path) const {
  nlohmann::json doc;
  {
    std::lock_guard<std::mutex> lock(mu_);
    doc = {{"traceEvents", events_}, {"displayTimeUnit", "ms"}};
  }
  io::write_file_atomic(path, doc.dump() + "\n");  // errors name `path` and strerror
}

}  // namespace training
