// CPU twin of the batched augmentation entries (kernels/common/augment.h): the same per-pixel
// Y9_HD math as kernels/cuda/augment.cu, looped over the batch rows (OpenMP over rows, disjoint
// writes, deterministic). The loader's CPU path keeps its own faster kernels (io/warp.h,
// io/color.h); this twin is the reference the CUDA kernels are compared with byte for byte.
#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif

#include "engine/half.h"
#include "kernels/common/augment.h"

namespace kernels::cpu {

namespace {

using engine::DType;

template <typename T>
void store_pixel(void* out, AugLayout layout, int64_t b, int y, int x, int h, int w, const augment::Pix& p) {
  const int64_t plane = static_cast<int64_t>(h) * w, base = b * 3 * plane + static_cast<int64_t>(y) * w + x;
  if constexpr (sizeof(T) == 1) {
    uint8_t* o = static_cast<uint8_t*>(out);
    if (layout == AugLayout::HwcBgrU8) {
      uint8_t* q = o + ((b * h + y) * w + x) * 3;
      q[0] = p.c[0], q[1] = p.c[1], q[2] = p.c[2];
      return;
    }
    o[base] = p.c[2], o[base + plane] = p.c[1], o[base + 2 * plane] = p.c[0];
  } else {
    T* o = static_cast<T*>(out);
    const uint8_t v[3] = {p.c[2], p.c[1], p.c[0]};
    for (int c = 0; c < 3; ++c) {
      const float f = augment::to_unit(v[c]);
      if constexpr (sizeof(T) == 4) o[base + c * plane] = f;
      else if constexpr (T::kBf16) o[base + c * plane].bits = engine::f32_to_bf16(f);
      else o[base + c * plane].bits = engine::f32_to_f16(f);
    }
  }
}

struct H16 {
  static constexpr bool kBf16 = false;
  uint16_t bits;
};
struct B16 {
  static constexpr bool kBf16 = true;
  uint16_t bits;
};

template <typename F>
void dispatch_out(DType dt, AugLayout layout, const char* op, F&& f) {
  Y9_CHECK_SHAPE(layout == AugLayout::ChwRgb || dt == DType::U8, op, ": the HWC BGR layout is uint8 only, got ",
                 engine::dtype_name(dt));
  switch (dt) {
    case DType::U8: f.template operator()<uint8_t>(); return;
    case DType::F32: f.template operator()<float>(); return;
    case DType::F16: f.template operator()<H16>(); return;
    case DType::BF16: f.template operator()<B16>(); return;
    default: Y9_CHECK_SHAPE(false, op, ": output dtype ", engine::dtype_name(dt), " not supported (u8, f32, f16, bf16)");
  }
}

/// augment_warp on the CPU: `tiles` and `samples` in host memory.
void augment_warp_entry(engine::DeviceContext&, DType dt, const uint8_t* tiles, const AugSample* samples, int64_t n,
                        int32_t out_h, int32_t out_w, const AugHsvModel& model, AugLayout layout, void* out) {
  Y9_CHECK_SHAPE(n >= 0 && out_h >= 1 && out_w >= 1, "augment_warp: bad batch ", n, " x ", out_h, " x ", out_w);
  dispatch_out(dt, layout, "augment_warp", [&]<typename T>() {
    const int64_t rows = n * out_h;
#pragma omp parallel for schedule(static) if (rows * out_w > 65536)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / out_h;
      const int y = static_cast<int>(r % out_h);
      for (int x = 0; x < out_w; ++x)
        store_pixel<T>(out, layout, b, y, x, out_h, out_w,
                       augment::sample_pixel(tiles, samples[b], model, x, y, out_h, out_w));
    }
  });
}

/// letterbox on the CPU: `src` and `samples` in host memory.
void letterbox_entry(engine::DeviceContext&, DType dt, const uint8_t* src, const LetterboxSample* samples, int64_t n,
                     int32_t out_h, int32_t out_w, AugLayout layout, void* out) {
  Y9_CHECK_SHAPE(n >= 0 && out_h >= 1 && out_w >= 1, "letterbox: bad batch ", n, " x ", out_h, " x ", out_w);
  dispatch_out(dt, layout, "letterbox", [&]<typename T>() {
    const int64_t rows = n * out_h;
#pragma omp parallel for schedule(static) if (rows * out_w > 65536)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / out_h;
      const int y = static_cast<int>(r % out_h);
      for (int x = 0; x < out_w; ++x)
        store_pixel<T>(out, layout, b, y, x, out_h, out_w, augment::letterbox_pixel(src, samples[b], x, y));
    }
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  const engine::DTypeSet dts{engine::DType::U8, engine::DType::F32, engine::DType::F16, engine::DType::BF16};
  b.add(kAugmentWarp, &augment_warp_entry, dts);
  b.add(kLetterbox, &letterbox_entry, dts);
}

}  // namespace kernels::cpu
