// CPU strided copy / fill / axpy / scale over any dtype pair (conversions through double):
// the core entries of engine/core_kernels.h.
#include <cstring>

#include "engine/core_kernels.h"
#include "engine/error.h"
#include "kernels/common/convert.h"
#include "kernels/cpu/nd_iter.h"

namespace kernels::cpu {

using engine::DeviceContext;
using engine::DType;

namespace {

using kernels::load_any;
using kernels::store_any;

template <typename T>
void copy_same_typed(T* dst, const T* src, const StridedLayout& dl, const StridedLayout& sl) {
  int64_t strides[2][kMaxDims];
  for (int d = 0; d < dl.ndim; ++d) {
    strides[0][d] = dl.strides[d];
    strides[1][d] = sl.strides[d];
  }
  nd_for_each_row<2>(dl.ndim, dl.sizes, strides, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* d = dst + off[0];
    const T* s = src + off[1];
    if (in[0] == 1 && in[1] == 1) {
      std::memcpy(d, s, static_cast<size_t>(n) * sizeof(T));
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * in[0]] = s[i * in[1]];
    }
  });
}

void copy_strided_cpu(void* dst, DType dt, const StridedLayout& dl, const void* src, DType st,
                      const StridedLayout& sl) {
  if (dt == st) {
    switch (engine::dtype_size(dt)) {
      case 1: return copy_same_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), dl, sl);
      case 2: return copy_same_typed(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), dl, sl);
      case 4: return copy_same_typed(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), dl, sl);
      case 8: return copy_same_typed(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), dl, sl);
    }
  }
  int64_t strides[2][kMaxDims];
  for (int d = 0; d < dl.ndim; ++d) {
    strides[0][d] = dl.strides[d];
    strides[1][d] = sl.strides[d];
  }
  nd_for_each_row<2>(dl.ndim, dl.sizes, strides, [&](const int64_t* off, int64_t n, const int64_t* in) {
    for (int64_t i = 0; i < n; ++i) {
      // i64 -> i64 is handled above; other integer conversions fit in a double.
      store_any(dst, dt, off[0] + i * in[0], load_any(src, st, off[1] + i * in[1]));
    }
  });
}

void copy_strided(DeviceContext&, void* dst, DType dt, const StridedLayout& dl, const void* src, DType st,
                  const StridedLayout& sl) {
  copy_strided_cpu(dst, dt, dl, src, st, sl);
}

void fill_strided(DeviceContext&, void* dst, DType dt, const StridedLayout& l, double value) {
  // Build the element once, then copy its bytes with a zero-stride source.
  alignas(8) unsigned char elem[8] = {};
  store_any(elem, dt, 0, value);
  StridedLayout src = l;
  for (int d = 0; d < src.ndim; ++d) src.strides[d] = 0;
  copy_strided_cpu(dst, dt, l, elem, dt, src);
}

template <typename T>
void axpy_typed(T* dst, const StridedLayout& dl, const T* src, const StridedLayout& sl, T alpha) {
  int64_t strides[2][kMaxDims];
  for (int d = 0; d < dl.ndim; ++d) {
    strides[0][d] = dl.strides[d];
    strides[1][d] = sl.strides[d];
  }
  nd_for_each_row<2>(dl.ndim, dl.sizes, strides, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* d = dst + off[0];
    const T* s = src + off[1];
    if (in[0] == 1 && in[1] == 1) {
      if (alpha == T(1)) {
        for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] += alpha * s[i];
      }
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * in[0]] += alpha * s[i * in[1]];
    }
  });
}

void axpy_strided(DeviceContext&, void* dst, DType dt, const StridedLayout& dl, const void* src, const StridedLayout& sl,
                      double alpha) {
  if (dt == DType::F32)
    return axpy_typed(static_cast<float*>(dst), dl, static_cast<const float*>(src), sl, static_cast<float>(alpha));
  return axpy_typed(static_cast<double*>(dst), dl, static_cast<const double*>(src), sl, alpha);
}

void scale_strided(DeviceContext&, void* dst, DType dt, const StridedLayout& l, double value) {
  int64_t strides[1][kMaxDims];
  for (int d = 0; d < l.ndim; ++d) strides[0][d] = l.strides[d];
  if (dt == DType::F32) {
    float* p = static_cast<float*>(dst);
    float v = static_cast<float>(value);
    nd_for_each_row<1>(l.ndim, l.sizes, strides, [&](const int64_t* off, int64_t n, const int64_t* in) {
      for (int64_t i = 0; i < n; ++i) p[off[0] + i * in[0]] *= v;
    });
  } else {
    double* p = static_cast<double*>(dst);
    nd_for_each_row<1>(l.ndim, l.sizes, strides, [&](const int64_t* off, int64_t n, const int64_t* in) {
      for (int64_t i = 0; i < n; ++i) p[off[0] + i * in[0]] *= value;
    });
  }
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(engine::kCopyStrided, &copy_strided, engine::kAllDTypes);
  b.add(engine::kFillStrided, &fill_strided, engine::kAllDTypes);
  b.add(engine::kAxpyStrided, &axpy_strided, engine::kF32F64);
  b.add(engine::kScaleStrided, &scale_strided, engine::kF32F64);
}

}  // namespace kernels::cpu
