// Shared pieces of the CUDA kernels (nvcc only): ceil_div, launch sizes, dtype load/store in
// device code, and host-side coalescing of strided layouts so kernels do fewer index divisions.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/half.h"
#include "kernels/common/strided.h"

namespace kernels::cuda {

constexpr int kBlock = 256;

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Grid size for `n` elements with a grid-stride loop (capped so huge tensors loop).
inline unsigned grid_for(int64_t n, int block = kBlock) {
  int64_t g = ceil_div(n, block);
  if (g > 65535LL * 16) g = 65535LL * 16;
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

/// Number of elements of a layout's iteration shape.
inline int64_t layout_numel(const StridedLayout& l) {
  int64_t n = 1;
  for (int d = 0; d < l.ndim; ++d) n *= l.sizes[d];
  return n;
}

/// Drops size-1 dims and merges dims contiguous in every one of the `n` layouts (same sizes),
/// in place. Keeps at least one dim. The linear element order is unchanged.
inline void coalesce(StridedLayout* ls, int n) {
  StridedLayout out[8];
  int nd = 0;
  for (int d = 0; d < ls[0].ndim; ++d) {
    if (ls[0].sizes[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < n && merge; ++k) merge = out[k].strides[nd - 1] == ls[k].strides[d] * ls[k].sizes[d];
    if (merge) {
      for (int k = 0; k < n; ++k) {
        out[k].sizes[nd - 1] *= ls[k].sizes[d];
        out[k].strides[nd - 1] = ls[k].strides[d];
      }
      continue;
    }
    for (int k = 0; k < n; ++k) {
      out[k].sizes[nd] = ls[k].sizes[d];
      out[k].strides[nd] = ls[k].strides[d];
    }
    ++nd;
  }
  if (nd == 0) {  // a single element
    for (int k = 0; k < n; ++k) {
      out[k].sizes[0] = 1;
      out[k].strides[0] = 1;
    }
    nd = 1;
  }
  for (int k = 0; k < n; ++k) {
    out[k].ndim = nd;
    ls[k] = out[k];
  }
}

/// True when the (coalesced) layout is one dense run: the linear index is the offset.
inline bool is_dense(const StridedLayout& l) { return l.ndim == 1 && l.strides[0] == 1; }

/// Offset of linear index i: the dense fast path skips the divisions.
template <bool Dense>
__device__ __forceinline__ int64_t offset_of(const StridedLayout& l, int64_t i) {
  if constexpr (Dense) return i;
  else return strided_offset(l, i);
}

// --- typed load/store in float compute (F32/F16/BF16) or double (F64) --------------------------

template <typename S> struct Scalar;  // storage type -> compute type and conversions
template <> struct Scalar<float> {
  using C = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <> struct Scalar<double> {
  using C = double;
  __device__ static double load(double v) { return v; }
  __device__ static double store(double v) { return v; }
};
struct Half16 { uint16_t bits; };
struct Bf16 { uint16_t bits; };
template <> struct Scalar<Half16> {
  using C = float;
  __device__ static float load(Half16 v) { return engine::f16_to_f32(v.bits); }
  __device__ static Half16 store(float v) { return Half16{engine::f32_to_f16(v)}; }
};
template <> struct Scalar<Bf16> {
  using C = float;
  __device__ static float load(Bf16 v) { return engine::bf16_to_f32(v.bits); }
  __device__ static Bf16 store(float v) { return Bf16{engine::f32_to_bf16(v)}; }
};

/// Calls f.template operator()<StorageType>() for F32/F64/F16/BF16; returns false otherwise.
template <typename F>
bool dispatch_float(engine::DType t, F&& f) {
  switch (t) {
    case engine::DType::F32: f.template operator()<float>(); return true;
    case engine::DType::F64: f.template operator()<double>(); return true;
    case engine::DType::F16: f.template operator()<Half16>(); return true;
    case engine::DType::BF16: f.template operator()<Bf16>(); return true;
    default: return false;
  }
}

}  // namespace kernels::cuda
