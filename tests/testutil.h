// Shared test helpers: fixture discovery, safetensors reading, tensor comparison, gradient checks.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/device.h"
#include "engine/tensor.h"

namespace testutil {

/// Folder of the official fixtures: $YOLOV9_REFERENCE, default ../shared/reference from the
/// project root. Empty string when it does not exist (tests skip), unless Y9_REQUIRE_REFERENCE=1
/// (CI), which throws std::runtime_error instead (the test fails). coco128_dir() alike.
std::string reference_dir();
/// coco128-layout folder: $YOLOV9_COCO128, default ../shared/data/coco128 from the project root.
std::string coco128_dir();
/// Files in `dir` whose names match the glob `pattern` (e.g. "module_*.json"), sorted.
std::vector<std::string> glob_files(const std::string& dir, const std::string& pattern);

/// Max |a-b| / (atol + rtol*|b|) over all elements (<= 1 means within tolerance). Shapes must match.
double tolerance_ratio(const engine::Tensor& a, const engine::Tensor& b, double rtol, double atol);

/// Expects a and b (any device/dtype) to agree elementwise within atol + rtol*|b|, reporting the
/// worst element.
::testing::AssertionResult all_close(const engine::Tensor& a, const engine::Tensor& b, double rtol,
                                     double atol);

/// Random tensor with values uniform in [lo, hi) from a seeded std::mt19937 (test inputs only).
engine::Tensor random_tensor(const engine::Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
                             engine::DType dtype = engine::DType::F64);

/// Finite-difference gradient check in double precision: f maps inputs (F64, requires_grad set
/// by the checker) to one tensor; the objective is sum(f(x) * W) for a fixed random W. Compares
/// autograd gradients of every input with central differences (step `eps`).
::testing::AssertionResult gradcheck(const std::function<engine::Tensor(const std::vector<engine::Tensor>&)>& f,
                                     std::vector<engine::Tensor> inputs, double eps = 1e-6, double rtol = 1e-5,
                                     double atol = 1e-7);

/// True when a and b have the same shape, dtype and bytes (read on the host; any device).
bool same_bits(const engine::Tensor& a, const engine::Tensor& b);

/// Sets the calling thread's OpenMP thread count (omp_set_num_threads) for a scope; restores the
/// previous count after.
class OmpThreads {
 public:
  explicit OmpThreads(int n);
  ~OmpThreads();
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int prev_;
};

/// True when the CUDA backend is compiled and engine::cuda_device_count() > 0.
bool gpu_available();
/// True when the environment has Y9_REQUIRE_GPU=1 (a GPU job must not pass by skipping).
bool gpu_required();

}  // namespace testutil

/// First statement of a GPU test (label gpu): skips with a reason when no CUDA device is usable,
/// or fails instead when Y9_REQUIRE_GPU=1 (guide 3.6). Usable only in a void function (TEST body).
#define Y9_SKIP_WITHOUT_GPU()                                                                          \
  do {                                                                                                 \
    if (!::testutil::gpu_available()) {                                                                \
      if (::testutil::gpu_required())                                                                  \
        FAIL() << "Y9_REQUIRE_GPU=1 but no CUDA device is usable (cuda compiled: "                     \
               << ::engine::cuda_compiled() << ")";                                                    \
      GTEST_SKIP() << (::engine::cuda_compiled() ? "no CUDA device visible (no driver or GPU)"         \
                                                 : "built without the CUDA backend (Y9_WITH_CUDA=OFF)"); \
    }                                                                                                  \
  } while (0)
