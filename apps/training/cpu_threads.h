// `yolov9 train --cpu-threads auto`: the OpenMP thread count of CPU training follows the load of
// other processes, so that a run beside a competing CPU-bound process does not collapse (issue 15,
// measurement (e)). With every core busy, each of our many short parallel regions ends in a barrier
// that waits for a thread the kernel has descheduled; measured on the 2-core machine (3 epochs of
// gelan-t at 128 px, batch 16, beside a busy loop at nice 0): 2 threads 61.9 s, 1 thread 25.3 s,
// against 19.6 s on the quiet machine with 2 threads. OMP_WAIT_POLICY=passive does not help
// (43.7 s shared, and 38.6 s quiet).
#pragma once

#include <string>

namespace training {

/// Picks the thread count of the next training step from how many runnable tasks of other
/// processes the machine has, sampled between steps.
/// A sample: others = procs_running of /proc/stat (runnable tasks of the whole machine, as the
/// kernel counts them now) minus this process's threads in state R (/proc/self/task/*/stat).
/// Policy: the median of the last 3 samples (each counted at most `cpus`) enters an exponential
/// average (weight 0.3 for the newest), so one burst of tasks, however large, never does; the
/// wanted count is clamp(round(cpus - average), 1, max_threads), where cpus is the machine's online
/// CPUs; the count changes only after 3 consecutive samples want the same new value. A lasting
/// change of load moves it after about 5 steps.
/// Limits: /proc/stat counts the whole host, so in a container pinned to a few CPUs of a large
/// host the governor sees load on CPUs it does not use (cpus is then the host's, so that load
/// rarely cuts threads) and misses sharing of its own CPUs. Data-parallel ranks on the CPU see each
/// other as load. Thread counts change oneDNN's work split and so the float rounding of
/// its reductions: `--cpu-threads auto` is refused with --deterministic.
class CpuThreadGovernor {
 public:
  /// `max_threads` (>= 1): the count on a quiet machine; `cpus` (>= 1): the machine's online CPUs.
  CpuThreadGovernor(int max_threads, int cpus);
  /// Samples the machine (reads /proc; a failed read counts as no other load) and returns the
  /// thread count for the next step, calling omp_set_num_threads on the calling thread when it
  /// changes. Call between steps, on the thread that runs them.
  int update();
  /// The policy alone (tests): one sample of `others` runnable tasks; returns the new count
  /// without touching OpenMP.
  int observe(double others);
  /// The thread count chosen by the last update() / observe() (max_threads before any).
  int threads() const { return threads_; }
  /// The current exponential average of the other processes' runnable tasks.
  double load() const { return load_; }

  /// Runnable tasks of other processes now (one /proc sample, >= 0), or -1 when /proc cannot be read.
  static double other_runnable_tasks();

 private:
  int max_threads_, cpus_;
  int threads_;
  double load_ = 0;
  double recent_[3] = {0, 0, 0};  // the last 3 samples (ring), clamped to [0, cpus]
  int next_ = 0;
  int pending_ = 0;  // the new count wanted by the last samples
  int streak_ = 0;   // how many consecutive samples wanted it
};

/// The value of `--cpu-threads` checked: "" (OpenMP's default count), "auto", or an integer in
/// 1..1024. Throws engine::ConfigError naming the flag and the value otherwise, and for "auto"
/// together with --deterministic.
void check_cpu_threads_option(const std::string& value, bool deterministic);

}  // namespace training
