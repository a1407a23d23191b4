// The CUDA convolution entries (kernels/common/conv.h): forward, backward-data and
// backward-weights through cuDNN, with the algorithm chosen by measuring once per shape and cached
// (PyTorch's cudnn.benchmark rule; cudnnFind*AlgorithmEx; keyed on the shape, the dtype and the
// data pointers' alignment, and run under the math type cuDNN measured it with; an algorithm that
// cuDNN refuses at run time gives way to the next fastest, with a warning), one shared workspace
// (CudaLibraries::workspace), and F32, F64, F16 and BF16 tensors with FP32 accumulation for the
// halves (the convolution's compute type). F32 allows TF32 tensor cores as PyTorch does by default
// for cuDNN (torch.backends.cudnn.allow_tf32); Y9_CUDNN_NO_TF32=1 turns that off. The bias and its
// gradient are our kernels (kernels/cuda/conv_bias.cu).
//
// Under the CUDA-on-CPU emulator cuDNN cannot run: the convolution itself is served by the CPU
// backend's entry (kernels/cuda/cpu_fallback.h; F32 and F64 directly, F16 and BF16 in F32 on
// upcast copies, rounded back), and the bias kernels run emulated.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/conv.h"
#include "kernels/cuda/conv_bias.h"

#if defined(Y9_CUDA_EMULATOR)
#include "kernels/cuda/cpu_fallback.h"
#elif defined(Y9_WITH_CUDNN)
#include "kernels/cuda/libraries.h"
#endif

namespace kernels::cuda {

namespace {

cudaStream_t compute_stream(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

#if defined(Y9_CUDA_EMULATOR)

size_t x_numel(const Conv2dShape& s) { return size_t(s.n * s.c_in * s.h * s.w); }
size_t w_numel(const Conv2dShape& s) { return size_t(s.c_out * (s.c_in / s.groups) * s.kh * s.kw); }
size_t y_numel(const Conv2dShape& s) { return size_t(s.n * s.c_out * s.h_out * s.w_out); }

// F16/BF16: the F32 CPU convolution on upcast copies, the result rounded back (cuDNN's FP32
// accumulation, up to the summation order).
void conv2d_forward(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* x, const void* w,
                    const void* bias, void* y, engine::DerivedData* /*w_derived: unused*/) {
  if (fallback_upcasts(dt)) {
    ctx.synchronize(engine::StreamKind::Compute);
    const std::vector<float> xf = upcast_f32(x, x_numel(s), dt), wf = upcast_f32(w, w_numel(s), dt);
    std::vector<float> yf(y_numel(s));
    run_on_cpu(ctx, kConv2dForward, engine::DType::F32, s, engine::DType::F32, static_cast<const void*>(xf.data()),
               static_cast<const void*>(wf.data()), static_cast<const void*>(nullptr), static_cast<void*>(yf.data()),
               static_cast<engine::DerivedData*>(nullptr));
    round_from_f32(yf.data(), yf.size(), dt, y);
  } else {
    run_on_cpu(ctx, kConv2dForward, dt, s, dt, x, w, nullptr, y, static_cast<engine::DerivedData*>(nullptr));
  }
  if (bias) conv_bias_add(compute_stream(ctx), dt, y, bias, s.n, s.c_out, s.h_out * s.w_out);
}

void conv2d_backward_data(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* dy,
                          const void* w, void* dx, engine::DerivedData* /*w_derived: unused*/) {
  if (fallback_upcasts(dt)) {
    ctx.synchronize(engine::StreamKind::Compute);
    const std::vector<float> dyf = upcast_f32(dy, y_numel(s), dt), wf = upcast_f32(w, w_numel(s), dt);
    std::vector<float> dxf(x_numel(s));
    run_on_cpu(ctx, kConv2dBackwardData, engine::DType::F32, s, engine::DType::F32,
               static_cast<const void*>(dyf.data()), static_cast<const void*>(wf.data()),
               static_cast<void*>(dxf.data()), static_cast<engine::DerivedData*>(nullptr));
    round_from_f32(dxf.data(), dxf.size(), dt, dx);
    return;
  }
  run_on_cpu(ctx, kConv2dBackwardData, dt, s, dt, dy, w, dx, static_cast<engine::DerivedData*>(nullptr));
}

void conv2d_backward_weights(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* x,
                             const void* dy, void* dw, void* dbias) {
  if (fallback_upcasts(dt)) {
    ctx.synchronize(engine::StreamKind::Compute);
    const std::vector<float> xf = upcast_f32(x, x_numel(s), dt), dyf = upcast_f32(dy, y_numel(s), dt);
    std::vector<float> dwf(w_numel(s));
    run_on_cpu(ctx, kConv2dBackwardWeights, engine::DType::F32, s, engine::DType::F32,
               static_cast<const void*>(xf.data()), static_cast<const void*>(dyf.data()),
               static_cast<void*>(dwf.data()), static_cast<void*>(nullptr));
    round_from_f32(dwf.data(), dwf.size(), dt, dw);
  } else {
    run_on_cpu(ctx, kConv2dBackwardWeights, dt, s, dt, x, dy, dw, nullptr);
  }
  if (dbias) conv_bias_grad(compute_stream(ctx), dt, dy, dbias, s.n, s.c_out, s.h_out * s.w_out);
}

constexpr engine::DTypeSet kConvDtypes = engine::kFloating;

#elif defined(Y9_WITH_CUDNN)

enum class Dir : int64_t { Forward = 0, BackwardData = 1, BackwardWeights = 2 };

cudnnDataType_t cudnn_dtype(engine::DType dt) {
  switch (dt) {
    case engine::DType::F32: return CUDNN_DATA_FLOAT;
    case engine::DType::F64: return CUDNN_DATA_DOUBLE;
    case engine::DType::F16: return CUDNN_DATA_HALF;
    case engine::DType::BF16: return CUDNN_DATA_BFLOAT16;
    default:
      Y9_THROW(engine::ShapeError, "conv2d: dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64, f16, bf16)");
  }
}

/// The descriptors of one convolution (created per call, as PyTorch does; they are host objects).
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors(const Conv2dShape& s, engine::DType dt) {
    const cudnnDataType_t t = cudnn_dtype(dt);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, t, int(s.n), int(s.c_in), int(s.h), int(s.w)));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, t, int(s.n), int(s.c_out), int(s.h_out), int(s.w_out)));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, int(s.c_out), int(s.c_in / s.groups), int(s.kh),
                                           int(s.kw)));
    // FP32 accumulation for the halves; F64 accumulates in double.
    const cudnnDataType_t compute = dt == engine::DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, int(s.pad_h), int(s.pad_w), int(s.stride_h), int(s.stride_w),
                                                int(s.dil_h), int(s.dil_w), CUDNN_CROSS_CORRELATION, compute));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, int(s.groups)));
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // F32: TF32 permitted on Ampere and later, as in PyTorch
    if (dt == engine::DType::F16 || dt == engine::DType::BF16) math = CUDNN_TENSOR_OP_MATH;
    if (dt == engine::DType::F32 && no_tf32()) math = CUDNN_FMA_MATH;
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
  }
  ~Descriptors() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  static bool no_tf32() {
    static const bool v = [] {
      const char* e = std::getenv("Y9_CUDNN_NO_TF32");
      return e && std::strcmp(e, "0") != 0;
    }();
    return v;
  }
};

/// The largest power of two (at most 16) that divides the address: an algorithm measured on
/// aligned buffers can refuse a less aligned view (CUDNN_STATUS_BAD_PARAM), so the cache keys on it
/// (as PyTorch's cuDNN v8 convolution cache keys on the alignment of its tensors).
int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t k = 1;
  while (k < 16 && a % uintptr_t(2 * k) == 0) k *= 2;
  return k;
}

/// a, b, c: the call's three data pointers (input, weight or gradient, output), in cuDNN's order.
CudaLibraries::ConvKey conv_key(Dir dir, const Conv2dShape& s, engine::DType dt, const void* a, const void* b,
                                const void* c) {
  return {static_cast<int64_t>(dir), static_cast<int64_t>(dt), s.n, s.c_in, s.h, s.w, s.c_out, s.kh, s.kw,
          s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.dil_h, s.dil_w, s.groups,
          alignment(a) | alignment(b) << 8 | alignment(c) << 16, 0};
}

/// "conv2d forward (x [n, c_in, h, w] f16, w [c_out, c_in/g, kh, kw], stride, pad, dilation, groups)":
/// the convolution a cuDNN error happened in.
std::string describe(const char* dir, const Conv2dShape& s, engine::DType dt) {
  return engine::detail::concat("conv2d ", dir, " (x [", s.n, ", ", s.c_in, ", ", s.h, ", ", s.w, "] ",
                                engine::dtype_name(dt), ", w [", s.c_out, ", ", s.c_in / s.groups, ", ", s.kh, ", ",
                                s.kw, "], stride ", s.stride_h, "x", s.stride_w, ", padding ", s.pad_h, "x", s.pad_w,
                                ", dilation ", s.dil_h, "x", s.dil_w, ", groups ", s.groups, ")");
}

/// The error `e` with the convolution it happened in appended to its message.
engine::CudnnError in_conv(const engine::CudnnError& e, const char* dir, const Conv2dShape& s, engine::DType dt) {
  return engine::CudnnError(e.message() + " in " + describe(dir, s, dt), e.expr().c_str(), e.file(), e.line());
}

/// Whether the find's result may serve: F32 with TF32 turned off takes no tensor-op algorithm.
bool math_allowed(cudnnMathType_t m, engine::DType dt) {
  return !(dt == engine::DType::F32 && Descriptors::no_tf32() &&
           (m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
}

/// Sets the math type the algorithm was measured with on the call's descriptor (cudnnFind may
/// report an algorithm under another math type than the descriptor's; running it under the
/// descriptor's can fail). F32 with TF32 turned off keeps CUDNN_FMA_MATH.
void use_math(const Descriptors& d, const CudaLibraries::ConvAlgo& a, engine::DType dt) {
  if (dt == engine::DType::F32 && Descriptors::no_tf32()) return;
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, static_cast<cudnnMathType_t>(a.math)));
}

// The largest workspace any algorithm asks for, capped (a find with a smaller workspace only
// skips the hungriest algorithms), and the workspace itself; 0 when it cannot be had.
constexpr size_t kFindWorkspaceCap = size_t(1) << 30;
void* find_workspace(CudaLibraries& lib, size_t want, size_t& got) {
  got = want < kFindWorkspaceCap ? want : kFindWorkspaceCap;
  if (got == 0) return nullptr;
  try {
    return lib.workspace(got);
  } catch (const engine::Error&) {  // out of memory: measure the algorithms that need none
    got = 0;
    return nullptr;
  }
}

/// Whether Y9_CUDNN_LOG is set (not "0"): each cudnnFind prints its convolution and its five fastest
/// results (algorithm, math type, milliseconds, workspace bytes) to stderr, a diagnostic for which
/// kernels a dtype ends up with.
bool log_finds() {
  static const bool v = [] {
    const char* e = std::getenv("Y9_CUDNN_LOG");
    return e && std::strcmp(e, "0") != 0;
  }();
  return v;
}

template <typename Perf>
void log_find(const Perf* perf, int n, const char* dir, const Conv2dShape& s, engine::DType dt) {
  if (!log_finds()) return;
  std::string line = "cudnn find: " + describe(dir, s, dt) + ":";
  for (int i = 0, shown = 0; i < n && shown < 5; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    line += engine::detail::concat(" [algo ", static_cast<int>(perf[i].algo), " math ",
                                   static_cast<int>(perf[i].mathType), " ", perf[i].time, " ms ", perf[i].memory,
                                   " B]");
    ++shown;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

/// The successful results of a cudnnFind*AlgorithmEx run (math_allowed), fastest first, each with
/// its workspace and math type; throws CudnnError if none.
template <typename Perf>
CudaLibraries::ConvAlgos candidates(const Perf* perf, int n, const char* what, engine::DType dt) {
  CudaLibraries::ConvAlgos r;
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && math_allowed(perf[i].mathType, dt))
      r.push_back(CudaLibraries::ConvAlgo{static_cast<int>(perf[i].algo), perf[i].memory,
                                          static_cast<int>(perf[i].mathType)});
  if (r.empty())
    throw engine::CudnnError(engine::detail::concat("cuDNN found no working ", what, " algorithm"), what, __FILE__,
                             __LINE__);
  return r;
}

/// The cached candidates of `key`, measured by `find()` on first use (shared: no copy per call).
template <typename Find>
std::shared_ptr<const CudaLibraries::ConvAlgos> cached_algos(CudaLibraries& lib, const CudaLibraries::ConvKey& key,
                                                             Find&& find) {
  {
    std::lock_guard<std::mutex> lock(lib.mu);
    auto it = lib.conv_algos.find(key);
    if (it != lib.conv_algos.end()) return it->second;
  }
  auto a = std::make_shared<const CudaLibraries::ConvAlgos>(find());
  std::lock_guard<std::mutex> lock(lib.mu);
  lib.conv_algos[key] = a;
  return a;
}

static_assert(CUDNN_MAJOR >= 9, "kernels/cuda/conv.cpp reads cuDNN 9's status categories");

/// Whether a status says that this algorithm cannot run this call (cuDNN 9's BAD_PARAM and
/// NOT_SUPPORTED categories), as opposed to a failure of the device or the library.
bool refused(cudnnStatus_t st) {
  const int c = CUDNN_STATUS_CATEGORY(int(st));
  return c == CUDNN_STATUS_BAD_PARAM || c == CUDNN_STATUS_NOT_SUPPORTED;
}

bool same_algo(const CudaLibraries::ConvAlgo& a, const CudaLibraries::ConvAlgo& b) {
  return a.algo == b.algo && a.math == b.math;
}

/// Runs the first candidate that cuDNN accepts: `run(algo, workspace)` returns the call's status.
/// cudnnFind measured its candidates on the first call's buffers, and one of them can still be
/// refused later (CUDNN_STATUS_BAD_PARAM on the H200 in FP16 training, before the math type was set
/// from the find), or its workspace be out of reach: the next candidate is tried with a warning,
/// and the refused ones leave the cache once a later one has run. Throws CudnnError when none runs
/// (naming the last algorithm), or on any other failure.
template <typename Run>
void run_candidates(CudaLibraries& lib, const CudaLibraries::ConvKey& key, const CudaLibraries::ConvAlgos& algos,
                    const Descriptors& d, engine::DType dt, const char* dir, const Conv2dShape& s, Run&& run) {
  for (size_t i = 0; i < algos.size(); ++i) {
    const CudaLibraries::ConvAlgo& a = algos[i];
    const bool last = i + 1 == algos.size();
    use_math(d, a, dt);
    void* ws = nullptr;
    if (a.workspace) {
      try {
        ws = lib.workspace(a.workspace);
      } catch (const engine::OutOfMemoryError&) {
        if (last) throw;
        std::fprintf(stderr, "warning: no memory for the %zu-byte workspace of cuDNN algorithm %d of %s; trying the "
                     "next one\n", a.workspace, a.algo, describe(dir, s, dt).c_str());
        continue;
      }
    }
    const cudnnStatus_t st = run(a, ws);
    if (st == CUDNN_STATUS_SUCCESS) {
      if (i > 0) {  // drop the refused prefix, unless another thread replaced the entry meanwhile
        std::lock_guard<std::mutex> lock(lib.mu);
        auto it = lib.conv_algos.find(key);
        if (it != lib.conv_algos.end()) {
          const CudaLibraries::ConvAlgos& now = *it->second;  // copied before the map lets it go
          if (now.size() > i &&
              std::equal(algos.begin(), algos.begin() + static_cast<std::ptrdiff_t>(i), now.begin(), same_algo))
            it->second = std::make_shared<const CudaLibraries::ConvAlgos>(
                now.begin() + static_cast<std::ptrdiff_t>(i), now.end());
        }
      }
      return;
    }
    if (!refused(st) || last) {
      const std::string what = engine::detail::concat("cudnnConvolution* with algorithm ", a.algo, ", math type ",
                                                      a.math, " (", i + 1, " of ", algos.size(), " tried)");
      throw_cudnn_error(st, what.c_str(), __FILE__, __LINE__);
    }
    (void)cudaGetLastError();  // a refused launch may leave a CUDA error behind: not the next kernel's
    std::fprintf(stderr, "warning: cuDNN refused algorithm %d (math type %d) of %s: %s; trying the next one\n", a.algo,
                 a.math, describe(dir, s, dt).c_str(), cudnnGetErrorString(st));
  }
}

/// cuDNN's scaling factors alpha = 1 and beta = 0 of a call of dtype `dt`: doubles for F64, floats
/// otherwise (cuDNN's rule for the scaling parameters).
struct Scaling {
  const void* one;
  const void* zero;
};
Scaling scaling(engine::DType dt) {
  static const double d1 = 1.0, d0 = 0.0;
  static const float f1 = 1.0f, f0 = 0.0f;
  return dt == engine::DType::F64 ? Scaling{&d1, &d0} : Scaling{&f1, &f0};
}

void conv2d_forward_impl(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* x,
                         const void* w, const void* bias, void* y, engine::DerivedData* /*w_derived: unused*/) {
  if (s.n == 0) return;  // cuDNN refuses empty tensors; nothing to write
  engine::CudaDeviceGuard g(ctx.device().index);
  auto& lib = ctx.state<CudaLibraries>();
  Descriptors d(s, dt);
  const auto key = conv_key(Dir::Forward, s, dt, x, w, y);
  const auto algos = cached_algos(lib, key, [&] {
    size_t want = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
      size_t b = 0;
      if (cudnnGetConvolutionForwardWorkspaceSize(lib.cudnn(), d.x, d.w, d.conv, d.y,
                                                  static_cast<cudnnConvolutionFwdAlgo_t>(a), &b) == CUDNN_STATUS_SUCCESS &&
          b > want)
        want = b;
    }
    size_t got = 0;
    void* ws = find_workspace(lib, want, got);
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(lib.cudnn(), d.x, x, d.w, w, d.conv, d.y, y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, ws, got));
    log_find(perf, n, "forward", s, dt);
    return candidates(perf, n, "convolution forward", dt);
  });
  run_candidates(lib, key, *algos, d, dt, "forward", s, [&](const CudaLibraries::ConvAlgo& a, void* ws) {
    const Scaling k = scaling(dt);
    return cudnnConvolutionForward(lib.cudnn(), k.one, d.x, x, d.w, w,
                                   d.conv, static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), ws, a.workspace,
                                   k.zero, d.y, y);
  });
  if (bias) conv_bias_add(compute_stream(ctx), dt, y, bias, s.n, s.c_out, s.h_out * s.w_out);
}

void conv2d_backward_data_impl(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* dy,
                               const void* w, void* dx, engine::DerivedData* /*w_derived: unused*/) {
  if (s.n == 0) return;
  engine::CudaDeviceGuard g(ctx.device().index);
  auto& lib = ctx.state<CudaLibraries>();
  Descriptors d(s, dt);
  const auto key = conv_key(Dir::BackwardData, s, dt, w, dy, dx);
  const auto algos = cached_algos(lib, key, [&] {
    size_t want = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; ++a) {
      size_t b = 0;
      if (cudnnGetConvolutionBackwardDataWorkspaceSize(lib.cudnn(), d.w, d.y, d.conv, d.x,
                                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(a),
                                                       &b) == CUDNN_STATUS_SUCCESS &&
          b > want)
        want = b;
    }
    size_t got = 0;
    void* ws = find_workspace(lib, want, got);
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(lib.cudnn(), d.w, w, d.y, dy, d.conv, d.x, dx,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf, ws, got));
    log_find(perf, n, "backward-data", s, dt);
    return candidates(perf, n, "convolution backward-data", dt);
  });
  run_candidates(lib, key, *algos, d, dt, "backward-data", s, [&](const CudaLibraries::ConvAlgo& a, void* ws) {
    const Scaling k = scaling(dt);
    return cudnnConvolutionBackwardData(lib.cudnn(), k.one, d.w, w, d.y,
                                        dy, d.conv, static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), ws,
                                        a.workspace, k.zero, d.x, dx);
  });
}

void conv2d_backward_weights_impl(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt,
                                  const void* x, const void* dy, void* dw, void* dbias) {
  engine::CudaDeviceGuard g(ctx.device().index);
  if (s.n == 0) {  // an empty batch: zero gradients
    const size_t es = engine::dtype_size(dt);
    CUDA_CHECK(cudaMemsetAsync(dw, 0, size_t(s.c_out * (s.c_in / s.groups) * s.kh * s.kw) * es, compute_stream(ctx)));
    if (dbias) CUDA_CHECK(cudaMemsetAsync(dbias, 0, size_t(s.c_out) * es, compute_stream(ctx)));
    return;
  }
  auto& lib = ctx.state<CudaLibraries>();
  Descriptors d(s, dt);
  const auto key = conv_key(Dir::BackwardWeights, s, dt, x, dy, dw);
  const auto algos = cached_algos(lib, key, [&] {
    size_t want = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; ++a) {
      size_t b = 0;
      if (cudnnGetConvolutionBackwardFilterWorkspaceSize(lib.cudnn(), d.x, d.y, d.conv, d.w,
                                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(a),
                                                         &b) == CUDNN_STATUS_SUCCESS &&
          b > want)
        want = b;
    }
    size_t got = 0;
    void* ws = find_workspace(lib, want, got);
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(lib.cudnn(), d.x, x, d.y, dy, d.conv, d.w, dw,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf, ws,
                                                              got));
    log_find(perf, n, "backward-weights", s, dt);
    return candidates(perf, n, "convolution backward-filter", dt);
  });
  run_candidates(lib, key, *algos, d, dt, "backward-weights", s, [&](const CudaLibraries::ConvAlgo& a, void* ws) {
    const Scaling k = scaling(dt);
    return cudnnConvolutionBackwardFilter(lib.cudnn(), k.one, d.x, x,
                                          d.y, dy, d.conv, static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), ws,
                                          a.workspace, k.zero, d.w, dw);
  });
  if (dbias) conv_bias_grad(compute_stream(ctx), dt, dy, dbias, s.n, s.c_out, s.h_out * s.w_out);
}

// The entries: a cuDNN error names the convolution it happened in (shape, dtype, direction).
void conv2d_forward(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* x, const void* w,
                    const void* bias, void* y, engine::DerivedData* w_derived) {
  try {
    conv2d_forward_impl(ctx, s, dt, x, w, bias, y, w_derived);
  } catch (const engine::CudnnError& e) {
    throw in_conv(e, "forward", s, dt);
  }
}

void conv2d_backward_data(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* dy,
                          const void* w, void* dx, engine::DerivedData* w_derived) {
  try {
    conv2d_backward_data_impl(ctx, s, dt, dy, w, dx, w_derived);
  } catch (const engine::CudnnError& e) {
    throw in_conv(e, "backward-data", s, dt);
  }
}

void conv2d_backward_weights(engine::DeviceContext& ctx, const Conv2dShape& s, engine::DType dt, const void* x,
                             const void* dy, void* dw, void* dbias) {
  try {
    conv2d_backward_weights_impl(ctx, s, dt, x, dy, dw, dbias);
  } catch (const engine::CudnnError& e) {
    throw in_conv(e, "backward-weights", s, dt);
  }
}

constexpr engine::DTypeSet kConvDtypes = engine::kFloating;

#endif

}  // namespace

#if defined(Y9_CUDA_EMULATOR) || defined(Y9_WITH_CUDNN)
Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kConv2dForward, &conv2d_forward, kConvDtypes);
  b.add(kConv2dBackwardData, &conv2d_backward_data, kConvDtypes);
  b.add(kConv2dBackwardWeights, &conv2d_backward_weights, kConvDtypes);
}
#endif

}  // namespace kernels::cuda
