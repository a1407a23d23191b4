// CUDA strided copy (with dtype conversion and broadcasting), fill, axpy and scale; twins of
// kernels/cpu/copy.cpp. Layouts are coalesced on the host; a fully dense pair skips the
// per-element index divisions. 64-bit indexing, grid-stride loops.
#include <cuda_runtime_api.h>

#include <cuda_runtime.h>

#include <cstring>

#include "engine/core_kernels.h"
#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/convert.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

using engine::DType;

namespace {

// Element conversion: kernels/common/convert.h (shared with the CPU twin).

template <typename T, bool Dense>
__global__ void copy_same_kernel(T* __restrict__ dst, StridedLayout dl, const T* __restrict__ src, StridedLayout sl,
                                 int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[offset_of<Dense>(dl, i)] = src[offset_of<Dense>(sl, i)];
}

__global__ void copy_convert_kernel(void* dst, DType dt, StridedLayout dl, const void* src, DType st,
                                    StridedLayout sl, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_any(dst, dt, strided_offset(dl, i), load_any(src, st, strided_offset(sl, i)));
}

template <typename T>
void launch_copy_same(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl, int64_t n,
                      cudaStream_t stream) {
  if (is_dense(dl) && is_dense(sl)) {
    Y9_LAUNCH(copy_same_kernel<T, true>, grid_for(n), kBlock, 0, stream, static_cast<T*>(dst), dl,
                                                                   static_cast<const T*>(src), sl, n);
  } else {
    Y9_LAUNCH(copy_same_kernel<T, false>, grid_for(n), kBlock, 0, stream, static_cast<T*>(dst), dl,
                                                                    static_cast<const T*>(src), sl, n);
  }
}

template <typename T, bool Dense>
__global__ void axpy_kernel(T* dst, StridedLayout dl, const T* __restrict__ src, StridedLayout sl,
                            typename Scalar<T>::C alpha, int64_t n) {
  using S = Scalar<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t od = offset_of<Dense>(dl, i);
    dst[od] = S::store(S::load(dst[od]) + alpha * S::load(src[offset_of<Dense>(sl, i)]));
  }
}

template <typename T>
__global__ void scale_kernel(T* dst, StridedLayout l, typename Scalar<T>::C value, int64_t n) {
  using S = Scalar<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = strided_offset(l, i);
    dst[o] = S::store(S::load(dst[o]) * value);
  }
}

template <typename T, bool Dense>
__global__ void fill_kernel(T* dst, StridedLayout l, T v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[offset_of<Dense>(l, i)] = v;
}

template <typename T>
void fill_kernel_dispatch(T* dst, const StridedLayout& l, T v, int64_t n, cudaStream_t stream) {
  if (is_dense(l))
    Y9_LAUNCH(fill_kernel<T, true>, grid_for(n), kBlock, 0, stream, dst, l, v, n);
  else
    Y9_LAUNCH(fill_kernel<T, false>, grid_for(n), kBlock, 0, stream, dst, l, v, n);
}

}  // namespace

// --- launchers --------------------------------------------------------------------------------

void copy_strided_cuda(void* dst, DType dt, const StridedLayout& dst_layout, const void* src, DType st,
                       const StridedLayout& src_layout, cudaStream_t stream) {
  int64_t n = layout_numel(dst_layout);
  if (n == 0) return;
  StridedLayout ls[2] = {dst_layout, src_layout};
  coalesce(ls, 2);
  if (dt == st) {
    switch (engine::dtype_size(dt)) {
      case 1: return launch_copy_same<uint8_t>(dst, ls[0], src, ls[1], n, stream);
      case 2: return launch_copy_same<uint16_t>(dst, ls[0], src, ls[1], n, stream);
      case 4: return launch_copy_same<uint32_t>(dst, ls[0], src, ls[1], n, stream);
      case 8: return launch_copy_same<uint64_t>(dst, ls[0], src, ls[1], n, stream);
    }
  }
  Y9_LAUNCH(copy_convert_kernel, grid_for(n), kBlock, 0, stream, dst, dt, ls[0], src, st, ls[1], n);
}

void fill_strided_cuda(void* dst, DType dt, const StridedLayout& layout, double value, cudaStream_t stream) {
  int64_t n = layout_numel(layout);
  if (n == 0) return;
  // Build the element bits on the host (same conversion code as the CPU twin), then broadcast-copy.
  StridedLayout l = layout;
  coalesce(&l, 1);
  uint64_t bits = 0;
  switch (dt) {
    case DType::F32: { float v = static_cast<float>(value); std::memcpy(&bits, &v, 4); break; }
    case DType::F64: std::memcpy(&bits, &value, 8); break;
    case DType::F16: bits = engine::f32_to_f16(static_cast<float>(value)); break;
    case DType::BF16: bits = engine::f32_to_bf16(static_cast<float>(value)); break;
    case DType::I32: { int32_t v = static_cast<int32_t>(value); std::memcpy(&bits, &v, 4); break; }
    case DType::I64: { int64_t v = static_cast<int64_t>(value); std::memcpy(&bits, &v, 8); break; }
    case DType::U8: bits = static_cast<uint8_t>(value); break;
    case DType::Bool: bits = value != 0.0; break;
  }
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    fill_kernel_dispatch(static_cast<T*>(dst), l, v, n, stream);
  };
  switch (engine::dtype_size(dt)) {
    case 1: launch(uint8_t{}); break;
    case 2: launch(uint16_t{}); break;
    case 4: launch(uint32_t{}); break;
    case 8: launch(uint64_t{}); break;
  }
}

void axpy_strided_cuda(void* dst, DType dt, const StridedLayout& dst_layout, const void* src,
                       const StridedLayout& src_layout, double alpha, cudaStream_t stream) {
  int64_t n = layout_numel(dst_layout);
  if (n == 0) return;
  StridedLayout ls[2] = {dst_layout, src_layout};
  coalesce(ls, 2);
  const bool dense = is_dense(ls[0]) && is_dense(ls[1]);
  bool ok = dispatch_float(dt, [&]<typename T>() {
    using C = typename Scalar<T>::C;
    if (dense)
      Y9_LAUNCH(axpy_kernel<T, true>, grid_for(n), kBlock, 0, stream, static_cast<T*>(dst), ls[0], static_cast<const T*>(src),
                                                               ls[1], static_cast<C>(alpha), n);
    else
      Y9_LAUNCH(axpy_kernel<T, false>, grid_for(n), kBlock, 0, stream, static_cast<T*>(dst), ls[0],
                                                                static_cast<const T*>(src), ls[1],
                                                                static_cast<C>(alpha), n);
  });
  Y9_CHECK_SHAPE(ok, "add_: dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64, f16, bf16)");
}

void scale_strided_cuda(void* dst, DType dt, const StridedLayout& layout, double value, cudaStream_t stream) {
  int64_t n = layout_numel(layout);
  if (n == 0) return;
  StridedLayout l = layout;
  coalesce(&l, 1);
  bool ok = dispatch_float(dt, [&]<typename T>() {
    using C = typename Scalar<T>::C;
    Y9_LAUNCH(scale_kernel<T>, grid_for(n), kBlock, 0, stream, static_cast<T*>(dst), l, static_cast<C>(value), n);
  });
  Y9_CHECK_SHAPE(ok, "mul_: dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64, f16, bf16)");
}

// --- entries -------------------------------------------------------------------------------------------

namespace {

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

void copy_entry(engine::DeviceContext& ctx, void* dst, DType dt, const StridedLayout& dl, const void* src, DType st,
                const StridedLayout& sl) {
  copy_strided_cuda(dst, dt, dl, src, st, sl, stream_of(ctx));
}
void fill_entry(engine::DeviceContext& ctx, void* dst, DType dt, const StridedLayout& l, double v) {
  fill_strided_cuda(dst, dt, l, v, stream_of(ctx));
}
void axpy_entry(engine::DeviceContext& ctx, void* dst, DType dt, const StridedLayout& dl, const void* src,
                const StridedLayout& sl, double alpha) {
  axpy_strided_cuda(dst, dt, dl, src, sl, alpha, stream_of(ctx));
}
void scale_entry(engine::DeviceContext& ctx, void* dst, DType dt, const StridedLayout& l, double v) {
  scale_strided_cuda(dst, dt, l, v, stream_of(ctx));
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(engine::kCopyStrided, &copy_entry, engine::kAllDTypes);
  b.add(engine::kFillStrided, &fill_entry, engine::kAllDTypes);
  b.add(engine::kAxpyStrided, &axpy_entry, engine::kFloating);
  b.add(engine::kScaleStrided, &scale_entry, engine::kFloating);
}

}  // namespace kernels::cuda
