// CPU inter-op parallelism (ops/parallel.h).
#include "ops/parallel.h"

#include <omp.h>

#include <atomic>
#include <exception>
#include <mutex>

#include "engine/autograd.h"
#include "ops/autocast.h"

namespace ops {

namespace {
std::atomic<int64_t> g_concurrent_runs{0};
}  // namespace

int concurrent_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

int64_t concurrent_runs() { return g_concurrent_runs.load(); }

void run_concurrently(const std::vector<std::function<void()>>& tasks) {
  const int n = static_cast<int>(tasks.size());
  // The whole team, even with fewer tasks than threads: a smaller team would make the runtime
  // shrink its thread pool, and the next full-width region would start threads again.
  const int threads = concurrent_threads();
  if (threads <= 1 || n <= 1) {
    for (const auto& t : tasks) t();
    return;
  }
  g_concurrent_runs++;
  const bool grad = engine::autograd::grad_enabled();
  const bool autocast = autocast_enabled();
  const engine::DType autocast_dt = autocast_dtype();
  std::exception_ptr first;
  std::mutex mu;
  auto record = [&] {
    std::lock_guard<std::mutex> lock(mu);
    if (!first) first = std::current_exception();
  };
#pragma omp parallel num_threads(threads)
  {
    // Grad mode, autocast and the OpenMP thread count are per thread: give each worker the
    // caller's states and 1 thread for what its tasks open (even where nested parallelism is on),
    // and restore its own when the region ends. Nothing may leave the region by an exception.
    const bool prev_grad = engine::autograd::grad_enabled();
    const int prev_threads = omp_get_max_threads();
    try {
      engine::autograd::set_grad_enabled(grad);
      omp_set_num_threads(1);
      AutocastGuard ac(autocast ? autocast_dt : engine::DType::F16, autocast);
#pragma omp for schedule(dynamic, 1)
      for (int i = 0; i < n; ++i) {
        try {
          tasks[static_cast<size_t>(i)]();
        } catch (...) {
          record();
        }
      }
    } catch (...) {
      record();
    }
    omp_set_num_threads(prev_threads);
    engine::autograd::set_grad_enabled(prev_grad);
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace ops
