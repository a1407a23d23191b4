// Helpers of the CUDA-vs-CPU parity tests (tests/kernels/*_cuda_test.cpp): host buffers of any
// dtype, strided/broadcast view layouts, device buffers from the caching allocator, per-dtype
// tolerances (guide 3.6), and the kernel entries of each backend's table (cpu_kernel /
// cuda_kernel). Device parts exist only with Y9_WITH_CUDA.
#pragma once
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/backend.h"
#include "engine/core_kernels.h"
#include "engine/dtype.h"
#include "kernels/common/strided.h"

#if defined(Y9_WITH_CUDA)
#include "engine/cuda_runtime.h"
#endif

namespace parity {

using engine::DType;
using kernels::StridedLayout;

/// How an operand's view sits in its buffer.
enum class Mode { Contiguous, Transposed, Step2, Broadcast };
inline const char* mode_name(Mode m) {
  switch (m) {
    case Mode::Contiguous: return "contiguous";
    case Mode::Transposed: return "transposed";
    case Mode::Step2: return "step2";
    case Mode::Broadcast: return "broadcast";
  }
  return "?";
}

struct View {
  StridedLayout layout;
  int64_t buffer_elems = 0;  ///< elements the buffer needs
};

inline StridedLayout row_major(const std::vector<int64_t>& shape) {
  StridedLayout l;
  l.ndim = static_cast<int>(shape.size());
  int64_t s = 1;
  for (int d = l.ndim - 1; d >= 0; --d) {
    l.sizes[d] = shape[d];
    l.strides[d] = s;
    s *= shape[d];
  }
  return l;
}

/// A view of `shape` in mode `m`: Transposed stores the last two dims swapped, Step2 takes every
/// other element of the last dim, Broadcast stores size 1 (stride 0) in every even dim.
inline View make_view(const std::vector<int64_t>& shape, Mode m) {
  const int nd = static_cast<int>(shape.size());
  std::vector<int64_t> stored = shape;
  StridedLayout l;
  if (m == Mode::Transposed && nd >= 2) {
    std::swap(stored[nd - 1], stored[nd - 2]);
    l = row_major(stored);
    std::swap(l.sizes[nd - 1], l.sizes[nd - 2]);
    std::swap(l.strides[nd - 1], l.strides[nd - 2]);
  } else if (m == Mode::Step2 && nd >= 1) {
    stored[nd - 1] *= 2;
    l = row_major(stored);
    l.sizes[nd - 1] = shape[nd - 1];
    l.strides[nd - 1] = 2;
  } else if (m == Mode::Broadcast) {
    for (int d = 0; d < nd; d += 2) stored[d] = 1;
    l = row_major(stored);
    for (int d = 0; d < nd; ++d) {
      l.sizes[d] = shape[d];
      if (d % 2 == 0) l.strides[d] = 0;
    }
  } else {
    l = row_major(shape);
  }
  View v{l, 1};
  for (int d = 0; d < nd; ++d) {
    if (shape[d] == 0) v.buffer_elems = 0;
    else v.buffer_elems += (shape[d] - 1) * l.strides[d];
  }
  if (v.buffer_elems < 1) v.buffer_elems = 1;
  return v;
}

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

/// Entry `key` of the CPU backend for `dt`, with the CPU context.
template <typename Fn>
engine::Kernel<Fn> cpu_kernel(const engine::KernelKey<Fn>& key, DType dt) {
  return engine::kernel(key, dt, engine::Device::cpu());
}
/// Entry `key` of the CUDA backend for `dt` on cuda:0 (throws NotSupportedError when absent).
template <typename Fn>
engine::Kernel<Fn> cuda_kernel(const engine::KernelKey<Fn>& key, DType dt) {
  return engine::kernel(key, dt, engine::Device::cuda(0));
}

/// Calls entry `key` of the CPU (run_cpu) or CUDA (run_cuda) backend for `dt` with its context.
template <typename Fn, typename... Args>
void run_cpu(const engine::KernelKey<Fn>& key, DType dt, Args&&... args) {
  auto k = cpu_kernel(key, dt);
  k.fn(k.ctx, std::forward<Args>(args)...);
}
template <typename Fn, typename... Args>
void run_cuda(const engine::KernelKey<Fn>& key, DType dt, Args&&... args) {
  auto k = cuda_kernel(key, dt);
  k.fn(k.ctx, std::forward<Args>(args)...);
}

/// Host bytes of `n` elements of `dtype`.
struct HostBuf {
  DType dtype = DType::F32;
  int64_t n = 0;
  std::vector<unsigned char> bytes;
  HostBuf() = default;
  HostBuf(DType t, int64_t count) : dtype(t), n(count), bytes(static_cast<size_t>(count) * engine::dtype_size(t)) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
};

/// Converts a whole buffer between dtypes with the CPU twin (contiguous 1-d copy).
inline HostBuf convert(const HostBuf& src, DType to) {
  HostBuf out(to, src.n);
  StridedLayout l = row_major({src.n});
  if (src.n > 0) {
    auto k = cpu_kernel(engine::kCopyStrided, to);
    k.fn(k.ctx, out.data(), to, l, src.data(), src.dtype, l);
  }
  return out;
}
inline std::vector<double> to_doubles(const HostBuf& b) {
  HostBuf d = convert(b, DType::F64);
  std::vector<double> v(static_cast<size_t>(b.n));
  if (b.n) std::memcpy(v.data(), d.data(), v.size() * sizeof(double));
  return v;
}
/// `n` uniform values in [lo, hi) stored as `dtype` (rounded by the CPU twin's conversion).
inline HostBuf random_buf(DType dtype, int64_t n, uint64_t seed, double lo = -3.0, double hi = 3.0) {
  HostBuf d(DType::F64, n);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  auto* p = static_cast<double*>(d.data());
  for (int64_t i = 0; i < n; ++i) p[i] = dist(rng);
  return convert(d, dtype);
}

/// Tolerance |got - ref| <= atol + eps * |ref| (llm.c form, guide 3.6). eps: FLT_EPSILON x8 for F32
/// (device expf/log1pf differ from glibc by a few ulp and nvcc contracts a*b+c into fma),
/// 2^-10 for F16 and 2^-7 for BF16 (one ulp of the output after rounding the same float),
/// 1e-12 for F64.
struct Tol {
  double eps, atol;
};
inline Tol tol_for(DType t) {
  switch (t) {
    case DType::F32: return {8 * FLT_EPSILON, 1e-6};
    case DType::F16: return {1.0 / 1024, 1e-6};
    case DType::BF16: return {1.0 / 128, 1e-6};
    case DType::F64: return {1e-12, 1e-12};
    default: return {0, 0};
  }
}

/// Compares whole buffers element by element (gaps of strided views included).
inline ::testing::AssertionResult close(const HostBuf& got, const HostBuf& ref, Tol tol) {
  if (got.n != ref.n) return ::testing::AssertionFailure() << "size " << got.n << " vs " << ref.n;
  auto g = to_doubles(got), r = to_doubles(ref);
  for (size_t i = 0; i < g.size(); ++i) {
    bool both_nan = std::isnan(g[i]) && std::isnan(r[i]);
    if (both_nan) continue;
    double d = std::fabs(g[i] - r[i]);
    if (!(d <= tol.atol + tol.eps * std::fabs(r[i])))
      return ::testing::AssertionFailure() << "element " << i << ": cuda " << g[i] << " vs cpu " << r[i]
                                           << " (|diff| " << d << ", eps " << tol.eps << ", atol " << tol.atol << ")";
  }
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult bitwise_equal(const HostBuf& got, const HostBuf& ref) {
  if (got.bytes == ref.bytes) return ::testing::AssertionSuccess();
  for (size_t i = 0; i < got.bytes.size(); ++i)
    if (got.bytes[i] != ref.bytes[i]) return ::testing::AssertionFailure() << "first differing byte " << i;
  return ::testing::AssertionFailure() << "size differs";
}

#if defined(Y9_WITH_CUDA)
/// Device copy of a host buffer (caching allocator of cuda:0); download() syncs the stream.
class DevBuf {
 public:
  explicit DevBuf(const HostBuf& h) : dtype_(h.dtype), n_(h.n), nbytes_(h.bytes.size()) {
    p_ = engine::cuda_allocator(0)->allocate(nbytes_);
    engine::memcpy_between_devices(p_, engine::Device::cuda(0), h.data(), engine::Device::cpu(), nbytes_);
  }
  ~DevBuf() { engine::cuda_allocator(0)->deallocate(p_, nbytes_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void* data() const { return p_; }
  HostBuf download() const {
    HostBuf h(dtype_, n_);
    engine::memcpy_between_devices(h.data(), engine::Device::cpu(), p_, engine::Device::cuda(0), nbytes_);
    return h;
  }

 private:
  DType dtype_;
  int64_t n_;
  size_t nbytes_;
  void* p_ = nullptr;
};
inline cudaStream_t stream0() { return engine::cuda_stream(0); }
#endif

/// Shapes used by every parity test: scalars, odd sizes, non-multiples of 8, one > 2^16 elements.
inline std::vector<std::vector<int64_t>> shapes() {
  return {{1}, {7}, {3, 5}, {2, 3, 17}, {4, 1, 9, 13}, {1, 33, 67}, {2, 3, 31, 45}, {1, 64, 40, 41}};
}

}  // namespace parity
