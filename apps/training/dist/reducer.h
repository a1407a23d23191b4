// The bucketed gradient reducer of data-parallel training (issue 13; the design of PyTorch DDP's
// Reducer: Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
// VLDB 2020), over the flat gradient buffer of a ParamStore.
//
// Buckets: the parameters in reverse registration order (the order in which backward finishes
// them), cut whenever a bucket reaches its cap (the first `first_bucket_mb`, the others
// `bucket_mb`). Because the store lays the parameters out contiguously in registration order, a
// bucket is one contiguous range of the gradient buffer and is all-reduced in place, without a
// copy (with `grad_dtype` F16/BF16 it is compressed into a wire buffer and back).
//
// Overlap: every trainable parameter has a grad-ready hook (engine autograd); when the last
// gradient of a bucket is ready, the bucket is handed to the communication thread, which makes
// the Communication stream wait for the compute work so far (an event), runs the all-reduce on its
// own communicator and records a done event. Buckets start strictly in index order on every rank
// (a bucket ready early waits for its predecessors), so every rank issues the same collectives in
// the same order. finish_backward() starts the buckets whose gradients never arrived, waits until
// every bucket is enqueued, and makes the compute stream wait on the buckets' done events (no
// device-wide sync; on the CPU the all-reduces are complete by then).
//
// Accumulation: begin_backward(false) makes the hooks do nothing, so micro-steps that do not
// update accumulate locally; the updating step's backward (begin_backward(true)) reduces the
// accumulated sums.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "apps/training/dist/allreduce.h"
#include "apps/training/dist/communicator.h"
#include "apps/training/param_store.h"
#include "apps/training/trace.h"
#include "engine/backend.h"

namespace training::dist {

struct ReducerOptions {
  double bucket_mb = 25.0;       ///< --bucket-mb: cap of every bucket after the first (MiB)
  double first_bucket_mb = 1.0;  ///< cap of the first bucket (MiB): communication starts early
  AllReduceAlgo algo = AllReduceAlgo::Auto;  ///< --allreduce
  AllReduceOptions allreduce;
  /// --grad-dtype: the payload on the wire. F32 (default), F16 or BF16: the bucket is scaled by
  /// 1/world_size, rounded to the wire dtype, all-reduced with FP32 accumulation and scaled back.
  engine::DType grad_dtype = engine::DType::F32;
  /// Sum (data-parallel training with the loss normalised globally) or Avg.
  ReduceOp op = ReduceOp::Sum;
  /// False: no hooks; every bucket is reduced in finish_backward (for measurements).
  bool overlap = true;
};

/// One bucket: the range [offset, offset + numel) of the gradient buffer (elements) holding the
/// parameters `params` (store indices, reverse registration order).
struct Bucket {
  int64_t offset = 0, numel = 0;
  std::vector<size_t> params;
  int trainable = 0;  ///< parameters of the bucket that get gradients
};

/// Time spent per phase (seconds, since construction or the last reset_stats()).
struct ReducerStats {
  double comm_s = 0;      ///< in all-reduces (the communication thread)
  double wait_s = 0;      ///< the training thread blocked in finish_backward (exposed communication)
  int64_t bytes = 0;      ///< payload bytes all-reduced
  int64_t reductions = 0; ///< bucket all-reduces run
};

class GradReducer {
 public:
  /// `store`: the flat parameters (F32 gradients); `comm`: a communicator used only by this
  /// reducer's thread (Communicator::duplicate() of the world), on the store's device.
  /// `tracer` (optional, not owned): bucket all-reduces go on its "communication" track.
  /// Throws engine::Error on bad options (caps <= 0, grad_dtype not F32/F16/BF16) or when the
  /// store's device differs from the communicator's.
  GradReducer(ParamStore& store, std::unique_ptr<Communicator> comm, ReducerOptions opts, Tracer* tracer = nullptr);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  /// Call before each backward: `sync` when this backward completes an accumulation (the step
  /// that updates), false otherwise. Throws engine::Error when the previous synced backward was
  /// not finished.
  void begin_backward(bool sync);
  /// Call after the backward of a synced step, before clipping and the optimizer: starts the
  /// remaining buckets and waits for them as described above. Rethrows a communication error
  /// (CommError naming the rank and the cause). No-op after begin_backward(false).
  void finish_backward();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const ReducerOptions& options() const { return opts_; }
  Communicator& comm() { return *comm_; }
  /// The communication counters since the last reset_stats() (thread-safe; the per-epoch log line).
  ReducerStats stats() const;
  /// Zeroes the counters.
  void reset_stats();

 private:
  void on_grad_ready(size_t param);
  void launch_ready_locked();
  void worker();
  void reduce_bucket(size_t b);

  ParamStore& store_;
  std::unique_ptr<Communicator> comm_;
  ReducerOptions opts_;
  Tracer* tracer_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // per parameter; -1 for frozen ones
  engine::Tensor wire_;         // compressed payload (grad_dtype != F32), as long as the gradient buffer
  std::vector<engine::Event> ready_, done_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  /// Shared with the grad-ready hooks (which outlive this object on the parameters): null once destroyed.
  std::shared_ptr<std::atomic<GradReducer*>> alive_;
  bool syncing_ = false, stopping_ = false;
  std::vector<int> remaining_;  // per bucket: gradients still to come this backward
  std::vector<bool> ready_flag_;
  size_t next_launch_ = 0;      // next bucket to hand over (in order)
  std::deque<size_t> queue_;
  size_t finished_ = 0;         // buckets reduced this backward
  std::exception_ptr error_;
  ReducerStats stats_;
  std::thread thread_;
};

}  // namespace training::dist
