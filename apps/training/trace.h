// A Chrome-trace recorder (`yolov9 train --trace FILE`): complete events ("ph": "X") on named
// tracks (forward, backward blocks and optimizer on "compute"; bucket all-reduces on
// "communication"; data waits on "data"), written as the JSON object format of the Trace Event
// Format (open it in chrome://tracing or https://ui.perfetto.dev). Thread-safe; records only while
// active (a few steps of a run), so the file stays small.
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace training {

class Tracer {
 public:
  /// `pid`: the process id shown (the rank).
  explicit Tracer(int pid = 0);
  /// Whether events are being recorded now.
  bool active() const { return active_; }
  void set_active(bool on) { active_ = on; }
  /// Microseconds since the tracer was made.
  int64_t now_us() const;
  /// Records [ts_us, ts_us + dur_us) named `name` on `track` (created on first use), with
  /// optional arguments shown in the viewer. No-op when not active.
  void complete(const std::string& name, const std::string& track, int64_t ts_us, int64_t dur_us,
                nlohmann::json args = nlohmann::json::object());
  /// Events recorded so far.
  size_t size() const;
  /// Writes {"traceEvents": [...], "displayTimeUnit": "ms"} to `path` atomically (temporary file,
  /// then rename). Throws engine::IoError naming the path.
  void write(const std::string& path) const;

  /// RAII span: records from construction to destruction (when the tracer is active then).
  class Span {
   public:
    Span(Tracer* t, std::string name, std::string track)
        : t_(t && t->active() ? t : nullptr), name_(std::move(name)), track_(std::move(track)),
          t0_(t_ ? t_->now_us() : 0) {}
    ~Span() {
      if (t_) t_->complete(name_, track_, t0_, t_->now_us() - t0_);
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    Tracer* t_;
    std::string name_, track_;
    int64_t t0_;
  };

 private:
  int pid_;
  std::chrono::steady_clock::time_point t0_;
  bool active_ = false;
  mutable std::mutex mu_;
  std::vector<std::string> tracks_;
  nlohmann::json events_ = nlohmann::json::array();
};

}  // namespace training
