// Shared test helpers (see testutil.h).
#include "tests/testutil.h"

#include <cstdlib>
#include <stdexcept>

#include <fnmatch.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>

#include "engine/autograd.h"

namespace fs = std::filesystem;

namespace testutil {

namespace {
std::string env_or(const char* var, const std::string& fallback) {
  const char* v = std::getenv(var);
  return (v && *v) ? std::string(v) : fallback;
}
std::string existing(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) ? p : std::string();
}
}  // namespace

// With Y9_REQUIRE_REFERENCE=1 (CI) a missing folder is an error, not a skip: a misplaced checkout
// must not pass by skipping every fixture test.
static std::string required(const std::string& dir, const char* var, const std::string& where) {
  if (dir.empty()) {
    const char* req = std::getenv("Y9_REQUIRE_REFERENCE");
    if (req && std::string(req) == "1")
      throw std::runtime_error(std::string("Y9_REQUIRE_REFERENCE=1 but ") + where + " does not exist (set " + var + ")");
  }
  return dir;
}
std::string reference_dir() {
  const std::string d = env_or("YOLOV9_REFERENCE", std::string(Y9_TESTUTIL_SOURCE_DIR) + "/../shared/reference");
  return required(existing(d), "YOLOV9_REFERENCE", d);
}
std::string coco128_dir() {
  const std::string d = env_or("YOLOV9_COCO128", std::string(Y9_TESTUTIL_SOURCE_DIR) + "/../shared/data/coco128");
  return required(existing(d), "YOLOV9_COCO128", d);
}

std::vector<std::string> glob_files(const std::string& dir, const std::string& pattern) {
  std::vector<std::string> out;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

double tolerance_ratio(const engine::Tensor& a, const engine::Tensor& b, double rtol, double atol) {
  auto va = a.to_vector<double>();
  auto vb = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    double r = std::fabs(va[i] - vb[i]) / (atol + rtol * std::fabs(vb[i]));
    if (std::isnan(r) || std::isnan(va[i]) != std::isnan(vb[i])) return INFINITY;
    worst = std::max(worst, r);
  }
  return worst;
}

::testing::AssertionResult all_close(const engine::Tensor& a, const engine::Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shape mismatch " << a.str() << " vs " << b.str();
  auto va = a.to_vector<double>();
  auto vb = b.to_vector<double>();
  double worst = -1;
  size_t wi = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    double r = std::fabs(va[i] - vb[i]) / (atol + rtol * std::fabs(vb[i]));
    if (std::isnan(va[i]) || std::isnan(vb[i])) r = (std::isnan(va[i]) && std::isnan(vb[i])) ? 0 : INFINITY;
    if (r > worst) {
      worst = r;
      wi = i;
    }
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "worst element " << wi << ": " << va[wi] << " vs expected " << vb[wi]
                                       << " (|diff|=" << std::fabs(va[wi] - vb[wi]) << ", rtol=" << rtol
                                       << ", atol=" << atol << ", " << va.size() << " elements, " << a.str() << ")";
}

engine::Tensor random_tensor(const engine::Shape& shape, uint64_t seed, double lo, double hi, engine::DType dtype) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(engine::shape_numel(shape)));
  for (auto& x : v) x = dist(rng);
  return engine::Tensor::from_vector(v, shape).to(dtype);
}

::testing::AssertionResult gradcheck(const std::function<engine::Tensor(const std::vector<engine::Tensor>&)>& f,
                                     std::vector<engine::Tensor> inputs, double eps, double rtol, double atol) {
  using engine::Tensor;
  for (auto& x : inputs) {
    if (x.dtype() != engine::DType::F64) x = x.to(engine::DType::F64);
    x = x.detach().contiguous();
    if (x.is_leaf() && !x.requires_grad()) x = x.clone().detach();
    x.set_requires_grad(true);
  }
  Tensor out = f(inputs);
  if (!out.requires_grad()) return ::testing::AssertionFailure() << "output does not require grad";
  Tensor w = random_tensor(out.shape(), 12345, -1.0, 1.0, out.dtype());
  std::vector<double> wv = w.to_vector<double>();
  out.backward(w);
  auto objective = [&](const std::vector<Tensor>& xs) {
    engine::autograd::NoGradGuard ng;
    auto ov = f(xs).to_vector<double>();
    double s = 0;
    for (size_t i = 0; i < ov.size(); ++i) s += ov[i] * wv[i];
    return s;
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor x = inputs[k];
    Tensor g = x.grad();
    std::vector<double> analytic = g.defined() ? g.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double orig = p[i];
      p[i] = orig + eps;
      double fp = objective(inputs);
      p[i] = orig - eps;
      double fm = objective(inputs);
      p[i] = orig;
      double numeric = (fp - fm) / (2 * eps);
      double diff = std::fabs(numeric - analytic[i]);
      if (diff > atol + rtol * std::fabs(numeric))
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": analytic " << analytic[i]
                                             << " vs numeric " << numeric << " (diff " << diff << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

bool gpu_available() { return engine::cuda_compiled() && engine::cuda_device_count() > 0; }

bool gpu_required() {
  const char* v = std::getenv("Y9_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

bool same_bits(const engine::Tensor& a, const engine::Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const engine::Tensor x = a.to(engine::Device::cpu()).contiguous(), y = b.to(engine::Device::cpu()).contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * engine::dtype_size(x.dtype())) == 0;
}

OmpThreads::OmpThreads(int n) : prev_(omp_get_max_threads()) { omp_set_num_threads(n); }
OmpThreads::~OmpThreads() { omp_set_num_threads(prev_); }

}  // namespace testutil
