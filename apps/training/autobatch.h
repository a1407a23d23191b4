// Memory of a training run (issue 11, "Memory"): the official AutoBatch (utils/autobatch.py
// check_train_batch_size / autobatch: --batch -1 picks the batch size that fills ~80% of the CUDA
// device), the --batch checks, the GPU_mem column of the progress line, and the --batch advice
// added to a CUDA out-of-memory error. The fit and the advice are pure functions (unit-tested on
// the CPU with numbers); autobatch() profiles a model on its device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/error.h"

namespace graph {
class Model;
}

namespace training {

/// Official autobatch(fraction=0.8, batch_size=16) and the batch sizes it profiles.
constexpr double kAutoBatchFraction = 0.8;
constexpr int64_t kAutoBatchDefault = 16;
constexpr int64_t kAutoBatchMax = 1024;  ///< official "safe range" upper end
constexpr int kAutoBatchRuns = 3;  ///< forward + backward runs per size (official profile(n=3))
inline const std::vector<int64_t>& autobatch_sizes() {
  static const std::vector<int64_t> s{1, 2, 4, 8, 16};
  return s;
}

/// Checks --batch-size (-1 = AutoBatch, else 1..max_batch) and, for data-parallel runs (world >
/// 1), the official DDP rule that AutoBatch is single-process only. Throws engine::ConfigError:
/// "--batch-size must be -1 (AutoBatch) or in 1..<max> (got <b>)" and, with world > 1 and b = -1,
/// the official "AutoBatch with --batch-size -1 is not compatible with YOLO Multi-GPU DDP
/// training, please pass a valid --batch-size".
void check_batch_size(int64_t batch, int64_t max_batch, int world);

/// One profiled batch size: train-mode forward + backward of a [batch, 3, imgsz, imgsz] input.
struct AutoBatchSample {
  int64_t batch = 0;
  bool ok = false;           ///< false: the run failed (out of memory, or any error); `error` says why
  bool out_of_memory = false;  ///< the failure was an engine::OutOfMemoryError
  double reserved_gib = 0;   ///< the allocator's reserved bytes after the runs, GiB (the fit's y)
  double peak_gib = 0;       ///< the allocator's peak bytes in use during runs 2.., GiB
  double forward_ms = 0, backward_ms = 0;  ///< mean over the kAutoBatchRuns runs
  std::string error;
};

/// The official fit: a line reserved_gib = slope * batch + intercept through the samples that
/// ran, b = int((free_gib * fraction - intercept) / slope); when a size failed and b reaches it,
/// the size before it; outside 1..kAutoBatchMax (or no usable slope) the default with
/// `anomaly` set. `predicted_fraction` = (slope * b + intercept + reserved + allocated) / total.
struct AutoBatchFit {
  int64_t batch = 0;
  double slope_gib = 0, intercept_gib = 0;  ///< GiB per image, GiB
  double predicted_fraction = 0;            ///< of the device total, 0..1 (and more when wrong)
  bool anomaly = false;                     ///< the official "CUDA anomaly detected" case
};

/// Fits `samples` (in profile order, the batch sizes increasing). Memory in GiB: total, reserved
/// and allocated before profiling; free = total - (reserved + allocated) as official. Throws
/// engine::ConfigError when no sample ran (not even batch 1 fits). One sample that ran fits a
/// line through the origin.
AutoBatchFit autobatch_fit(const std::vector<AutoBatchSample>& samples, double total_gib, double reserved_gib,
                           double allocated_gib, double fraction = kAutoBatchFraction,
                           int64_t default_batch = kAutoBatchDefault);

/// Options of autobatch().
struct AutoBatchOptions {
  std::vector<int64_t> batch_sizes = autobatch_sizes();
  double fraction = kAutoBatchFraction;
  int64_t default_batch = kAutoBatchDefault;
  /// > 0: the device total in bytes instead of cudaMemGetInfo's (tests: a deterministic choice).
  int64_t total_bytes_override = 0;
  /// Forward + backward runs per size (>= 1; the memory is measured over runs 2.. when there are
  /// two or more). Tests use fewer than the official 3.
  int runs = kAutoBatchRuns;
};

/// What autobatch() measured and chose (for tests and logs).
struct AutoBatchResult {
  int64_t batch = 0;
  double total_gib = 0, reserved_gib = 0, allocated_gib = 0, free_gib = 0;
  std::vector<AutoBatchSample> samples;
  AutoBatchFit fit;
};

/// The device of the model's parameters (official next(model.parameters()).device); the CPU for
/// a model without parameters.
engine::Device parameters_device(const graph::Model& model);

/// Official check_train_batch_size(model, imgsz): the batch size for training `model` at `imgsz`
/// pixels on `device` (where its parameters are). Prints the official lines prefixed
/// "AutoBatch: ". On the CPU: "CUDA not detected, using default CPU batch-size 16" and the
/// default. On CUDA: the device line (total, reserved, allocated, free GiB), then per batch size
/// opt.runs (default kAutoBatchRuns) train-mode forwards and backwards of the sum of the outputs
/// (official torch_utils.profile(n=3); the allocator's cache emptied and its peak reset before the
/// first run and again after it, so the memory leaves out the blocks the first run's cuDNN
/// algorithm search left in the cache; the shared cuDNN workspace the search grew stays, as in
/// training), the profile table, the fit and "Using batch-size B for CUDA:i X.XXG/Y.YYG (Z%) ✅".
/// Any engine::Error of a size (out of memory, a shape a library refuses) is printed and marks it
/// failed, as the official `except Exception`. The model is left as it was after any engine::Error
/// of a size: BatchNorm statistics restored, parameter gradients cleared. Errors: ConfigError when
/// opt.runs < 1 (before anything changes) or the first size fails (naming its error: "not even
/// batch 1 fits" for an out-of-memory error, "the profile of batch 1 failed" otherwise).
/// Determinism: the samples are the same bytes on every call once the cuDNN workspace has reached
/// its size (a first call may grow it from size to size; allocation sizes and order are otherwise
/// the host's program order); the choice also depends on the memory held before the call
/// (official free = total - (reserved + allocated)).
AutoBatchResult autobatch(graph::Model& model, engine::Device device, int64_t imgsz,
                          const AutoBatchOptions& opt = {});

/// The progress line's memory column (header, value): on CUDA "GPU_mem" and the allocator's
/// reserved bytes (official torch.cuda.memory_reserved() / 1E9, "%.3gG"); on the CPU our
/// "CPU_mem" column, the CPU allocator's peak tensor bytes (deviation: the official prints 0G).
struct MemColumn {
  const char* header;
  std::string value;
};
MemColumn progress_mem_column(engine::Device device);

/// --batch advice after an out-of-memory error: the largest batch whose estimated memory
/// (peak_bytes / batch per image, the fixed part neglected) stays within `fraction` of
/// total_bytes, and below `batch` (which failed). 0 when even batch 1 is not expected to fit
/// (batch 1 failed). Inputs must be > 0 (peak_bytes 0: 0 is returned).
int64_t suggest_batch(int64_t peak_bytes, int64_t batch, int64_t total_bytes, double fraction = kAutoBatchFraction);

/// The advice sentence: "try --batch N (measured peak X GiB for batch B, Y MiB per image; device
/// total Z GiB)", or with N = 0 "batch 1 does not fit: lower --img (...)".
std::string oom_batch_advice(int64_t peak_bytes, int64_t batch, int64_t total_bytes);

/// The advice for `device` (its allocator's peak and cudaMemGetInfo total; "" on the CPU or when
/// the runtime cannot tell), for a run of `batch` images per step. Never throws.
std::string oom_batch_advice(engine::Device device, int64_t batch);

/// `e` with " Estimate: " + oom_batch_advice(device, batch) appended to its message (same
/// expression and source location), or `e` unchanged when there is no advice. Never throws.
engine::OutOfMemoryError with_batch_advice(const engine::OutOfMemoryError& e, engine::Device device, int64_t batch);

}  // namespace training
