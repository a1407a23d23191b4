// grad_norm.csv: the total gradient norm of every optimizer step of a training run (before
// clipping), one row per step, appended as training goes. It is what grad_norm.png is drawn from
// and what a resumed run reads back (the per-epoch mean in results.csv includes the steps before
// the interruption). Not an official file: the official train_dual.py does not log the norm.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace io {

/// One optimizer step.
struct GradNormRow {
  int64_t epoch = 0;      ///< 0-based epoch of the step
  int64_t iteration = 0;  ///< ni = batch index + nb * epoch of the batch that completed the step
  double x = 0;           ///< epoch + (batch index + 1) / nb: the step's position in epochs (plot axis)
  double norm = 0;        ///< total L2 norm of the gradients before clipping (FP32 value; may be inf/nan)
};

/// Appends `row` to the CSV at `path` ("epoch,iteration,x,grad_norm" header written when the
/// file is new or empty; norms with 9 significant digits, enough to round-trip an FP32 value).
/// Throws engine::IoError naming the path when it cannot be written (e.g. "No space left on device").
void append_grad_norm(const std::string& path, const GradNormRow& row);

/// Reads the rows of `path` in file order; a missing file gives no rows. Throws engine::IoError
/// naming the path and line on a malformed line or a header that is not grad_norm.csv's.
std::vector<GradNormRow> read_grad_norms(const std::string& path);

/// Keeps only the rows with iteration < `first_dropped` (a resumed run re-runs the steps after its
/// checkpoint, so their rows would appear twice) by rewriting `path` atomically (write to a
/// temporary file in the same folder, then rename). Returns the rows kept. A missing file stays
/// missing. Throws engine::IoError naming the path on read or write errors.
std::vector<GradNormRow> truncate_grad_norms(const std::string& path, int64_t first_dropped);

}  // namespace io
