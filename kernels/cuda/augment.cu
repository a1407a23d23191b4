// CUDA batched augmentation entries (kernels/common/augment.h; issue 12, item 1): one thread per
// output pixel. augment_warp samples the mosaic tiles directly (the 2s x 2s canvas is never
// materialised), warps (bilinear, border 114), blends the mixup partner, applies augment_hsv and
// the flips, and writes the model input layout; letterbox resizes and pads. The per-pixel math is
// the Y9_HD code of kernels/common/augment.h, shared with the CPU twin (kernels/cpu/augment.cpp).
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/augment.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

using engine::DType;

namespace {

// --- output stores --------------------------------------------------------------------------

/// Writes pixel (b, y, x) = p (B, G, R bytes) in `layout` with storage type T (uint8_t, float,
/// Half16, Bf16; floats get float(u8) / 255.0f).
template <typename T>
__device__ __forceinline__ void store_pixel(void* out, AugLayout layout, int64_t b, int y, int x, int h, int w,
                                            const augment::Pix& p) {
  if constexpr (sizeof(T) == 1) {
    uint8_t* o = static_cast<uint8_t*>(out);
    if (layout == AugLayout::HwcBgrU8) {
      uint8_t* q = o + ((b * h + y) * w + x) * 3;
      q[0] = p.c[0], q[1] = p.c[1], q[2] = p.c[2];
      return;
    }
    const int64_t plane = static_cast<int64_t>(h) * w, base = b * 3 * plane + static_cast<int64_t>(y) * w + x;
    o[base] = p.c[2], o[base + plane] = p.c[1], o[base + 2 * plane] = p.c[0];
  } else {
    using S = Scalar<T>;
    T* o = static_cast<T*>(out);
    const int64_t plane = static_cast<int64_t>(h) * w, base = b * 3 * plane + static_cast<int64_t>(y) * w + x;
    o[base] = S::store(augment::to_unit(p.c[2]));
    o[base + plane] = S::store(augment::to_unit(p.c[1]));
    o[base + 2 * plane] = S::store(augment::to_unit(p.c[0]));
  }
}

// --- kernels ---------------------------------------------------------------------------------

template <typename T>
__global__ void augment_warp_kernel(const uint8_t* __restrict__ tiles, const AugSample* __restrict__ samples,
                                    int64_t total, int32_t out_h, int32_t out_w, AugHsvModel model, AugLayout layout,
                                    void* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int x = static_cast<int>(i % out_w);
    const int64_t t = i / out_w;
    const int y = static_cast<int>(t % out_h);
    const int64_t b = t / out_h;
    const augment::Pix p = augment::sample_pixel(tiles, samples[b], model, x, y, out_h, out_w);
    store_pixel<T>(out, layout, b, y, x, out_h, out_w, p);
  }
}

template <typename T>
__global__ void letterbox_kernel(const uint8_t* __restrict__ src, const LetterboxSample* __restrict__ samples,
                                 int64_t total, int32_t out_h, int32_t out_w, AugLayout layout, void* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int x = static_cast<int>(i % out_w);
    const int64_t t = i / out_w;
    const int y = static_cast<int>(t % out_h);
    const int64_t b = t / out_h;
    store_pixel<T>(out, layout, b, y, x, out_h, out_w, augment::letterbox_pixel(src, samples[b], x, y));
  }
}

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

/// Calls f.template operator()<T>() for the output storage type of (dtype, layout).
template <typename F>
void dispatch_out(DType dt, AugLayout layout, const char* op, F&& f) {
  Y9_CHECK_SHAPE(layout == AugLayout::ChwRgb || dt == DType::U8, op, ": the HWC BGR layout is uint8 only, got ",
                 engine::dtype_name(dt));
  switch (dt) {
    case DType::U8: f.template operator()<uint8_t>(); return;
    case DType::F32: f.template operator()<float>(); return;
    case DType::F16: f.template operator()<Half16>(); return;
    case DType::BF16: f.template operator()<Bf16>(); return;
    default: Y9_CHECK_SHAPE(false, op, ": output dtype ", engine::dtype_name(dt), " not supported (u8, f32, f16, bf16)");
  }
}

// --- entries (signatures and semantics: kernels/common/augment.h) -----------------------------

/// augment_warp on CUDA: `tiles` and `samples` in device memory; one launch for the batch.
void augment_warp_entry(engine::DeviceContext& ctx, DType dt, const uint8_t* tiles, const AugSample* samples,
                        int64_t n, int32_t out_h, int32_t out_w, const AugHsvModel& model, AugLayout layout, void* out) {
  Y9_CHECK_SHAPE(n >= 0 && out_h >= 1 && out_w >= 1, "augment_warp: bad batch ", n, " x ", out_h, " x ", out_w);
  const int64_t total = n * out_h * out_w;
  if (total == 0) return;
  dispatch_out(dt, layout, "augment_warp", [&]<typename T>() {
    Y9_LAUNCH(augment_warp_kernel<T>, grid_for(total), kBlock, 0, stream_of(ctx), tiles, samples, total, out_h, out_w,
              model, layout, out);
  });
}

/// letterbox on CUDA: `src` and `samples` in device memory; one launch for the batch.
void letterbox_entry(engine::DeviceContext& ctx, DType dt, const uint8_t* src, const LetterboxSample* samples,
                     int64_t n, int32_t out_h, int32_t out_w, AugLayout layout, void* out) {
  Y9_CHECK_SHAPE(n >= 0 && out_h >= 1 && out_w >= 1, "letterbox: bad batch ", n, " x ", out_h, " x ", out_w);
  const int64_t total = n * out_h * out_w;
  if (total == 0) return;
  dispatch_out(dt, layout, "letterbox", [&]<typename T>() {
    Y9_LAUNCH(letterbox_kernel<T>, grid_for(total), kBlock, 0, stream_of(ctx), src, samples, total, out_h, out_w,
              layout, out);
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  const engine::DTypeSet dts{DType::U8, DType::F32, DType::F16, DType::BF16};
  b.add(kAugmentWarp, &augment_warp_entry, dts);
  b.add(kLetterbox, &letterbox_entry, dts);
}

}  // namespace kernels::cuda
