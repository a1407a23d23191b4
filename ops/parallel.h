// Inter-op parallelism on the CPU: independent pieces of a pass (the detection head's box and
// class conv chains at batch 1) run at the same time, one per OpenMP thread, instead of one after
// the other with each op split over the threads (too little work per op for that to pay).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace ops {

/// The number of CPU threads run_concurrently would spread tasks over: omp_get_max_threads(), or
/// 1 inside an active OpenMP parallel region (nested regions get one thread).
int concurrent_threads();

/// Runs every task once on a team of concurrent_threads() OpenMP threads, each task on one thread
/// (dynamic schedule in vector order, so put the longest first; threads beyond the task count
/// idle). Ops inside a task run single-threaded: the task's thread has an OpenMP thread count of 1
/// (so regions it opens get one thread even where nested parallelism is enabled), and the CPU
/// convolutions see omp_in_parallel() and use 1-thread primitives (kernels/cpu/conv.cpp). The
/// calling thread's grad mode (engine::autograd) and autocast state (ops/autocast.h) hold inside
/// every task. Tasks must not touch the same tensors' data or the same modules' state. With one
/// thread or at most one task the tasks run in order on the calling thread. An exception thrown by
/// a task is rethrown here after all tasks have finished (the first one thrown, when several are).
void run_concurrently(const std::vector<std::function<void()>>& tasks);

/// How many run_concurrently calls so far ran their tasks on more than one thread (process-wide;
/// tests and benchmarks check that a path really ran concurrently).
int64_t concurrent_runs();

}  // namespace ops
