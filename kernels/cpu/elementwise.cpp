// CPU twins of the pointwise ops (kernels/common/elementwise.h): broadcasting binary ops, every
// UnaryOp, BCE with logits, forward and backward, over strided layouts through the one CPU
// iterator (nd_iter.h). The op is turned into a template parameter outside the loops so the inner
// loop is a switch-free body; contiguous and broadcast-scalar inner strides get their own loops.
#include "kernels/common/elementwise.h"

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/nd_iter.h"
#include "kernels/cpu/silu_rows.h"

namespace kernels::cpu {

using engine::DeviceContext;
using engine::DType;

namespace {

// --- vectorised F32 SiLU and sigmoid --------------------------------------------------------------
// SiLU is the activation of every Conv of YOLOv9, so its pointwise passes are a large share of a
// CPU forward and backward (issue 15: 15% of a yolov9-t eval forward with the scalar libm expf).
// These loops compute the same formulas as kernels/common/elementwise.h (sigmoid = 1 / (1 + e^-x),
// silu = x * sigmoid(x), silu' = s (1 + x (1 - s))) with an inlined e^x that the compiler
// vectorises.

// Eight floats at a time in GCC vector types (one AVX register; two SSE registers on the baseline):
// comparisons give lane masks and `mask ? a : b` selects lane by lane, so there is no branch. The
// helpers are always inlined, so no 32-byte vector crosses a call (CMakeLists.txt turns GCC's
// -Wpsabi note off for this file).
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));

__attribute__((always_inline)) inline v8f load8(const float* p) {
  v8f v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store8(float* p, v8f v) { __builtin_memcpy(p, &v, sizeof v); }

/// e^x in F32, lane by lane, within 2 ulp (Cephes's bound) of the correctly rounded value for x
/// in [-87.33, 88.37]; +inf above 88.3763 (where 2^n would overflow: the true value is over 2.4e38 there),
/// FLT_MIN's order below -87.3365 (the true value is a denormal), NaN for NaN. Cephes expf
/// (S. L. Moshier): x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two constants), e^r by a
/// degree-7 polynomial, then scaled by 2^n through the exponent bits.
__attribute__((always_inline)) inline v8f exp8(v8f x) {
  const v8f zero = {}, inf = zero + std::numeric_limits<float>::infinity();
  const v8i over = x > 88.3762626647949f;
  x = x < -87.3365447504f ? zero - 87.3365447504f : x;
  x = over ? zero : x;
  const v8f t = x * 1.44269504088896341f + 12582912.f;  // 1.5 * 2^23: rounds x log2(e) to an integer
  const v8f n = t - 12582912.f;
  const v8u ni = std::bit_cast<v8u>(t) - 0x4B400000u;
  v8f r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  v8f p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const v8f e = p * (r * r) + r + 1.f;
  const v8u bits = (ni + 127u) << 23;
  const v8f y = e * std::bit_cast<v8f>(bits);
  return over ? inf : y;
}

__attribute__((always_inline)) inline v8f sigmoid8(v8f x) { return 1.f / (1.f + exp8(-x)); }

/// f over 8-float blocks of n elements (the last block through a zero-padded copy).
template <int kIn, typename F>
__attribute__((always_inline)) inline void blocks8(const float* const (&in)[kIn], float* out, int64_t n, F f) {
  int64_t i = 0;
  v8f v[kIn];
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < kIn; ++k) v[k] = load8(in[k] + i);
    store8(out + i, f(v));
  }
  if (i < n) {
    float buf[kIn][8] = {}, res[8];
    for (int k = 0; k < kIn; ++k) {
      for (int64_t j = 0; j < n - i; ++j) buf[k][j] = in[k][i + j];
      v[k] = load8(buf[k]);
    }
    store8(res, f(v));
    for (int64_t j = 0; j < n - i; ++j) out[i + j] = res[j];
  }
}

__attribute__((always_inline)) inline void silu_row(const float* x, float* y, int64_t n) {
  blocks8<1>({x}, y, n, [](const v8f* v) { return v[0] * sigmoid8(v[0]); });
}
__attribute__((always_inline)) inline void sigmoid_row(const float* x, float* y, int64_t n) {
  blocks8<1>({x}, y, n, [](const v8f* v) { return sigmoid8(v[0]); });
}
__attribute__((always_inline)) inline void silu_backward_row(const float* x, const float* dy, float* dx, int64_t n) {
  blocks8<2>({x, dy}, dx, n, [](const v8f* v) {
    const v8f s = sigmoid8(v[0]);
    return v[1] * s * (1.f + v[0] * (1.f - s));
  });
}

// On x86-64 each loop is compiled twice, for AVX2 + FMA and for the baseline, and the CPU picks
// one at run time (__builtin_cpu_supports; GCC's target_clones("arch=haswell") would test for an
// Intel Haswell by name and leave AMD CPUs on the baseline).
#if defined(__x86_64__) && defined(__GNUC__)
#define Y9_AVX2 __attribute__((target("avx2,fma")))
Y9_AVX2 void silu_avx2(const float* x, float* y, int64_t n) { silu_row(x, y, n); }
Y9_AVX2 void sigmoid_avx2(const float* x, float* y, int64_t n) { sigmoid_row(x, y, n); }
Y9_AVX2 void silu_backward_avx2(const float* x, const float* dy, float* dx, int64_t n) {
  silu_backward_row(x, dy, dx, n);
}
bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}
#define Y9_IF_AVX2(call_avx2) \
  if (have_avx2()) return call_avx2;
#else
#define Y9_IF_AVX2(call_avx2)
#endif

void silu_f32(const float* x, float* y, int64_t n) {
  Y9_IF_AVX2(silu_avx2(x, y, n))
  silu_row(x, y, n);
}
void sigmoid_f32(const float* x, float* y, int64_t n) {
  Y9_IF_AVX2(sigmoid_avx2(x, y, n))
  sigmoid_row(x, y, n);
}
void silu_backward_f32(const float* x, const float* dy, float* dx, int64_t n) {
  Y9_IF_AVX2(silu_backward_avx2(x, dy, dx, n))
  silu_backward_row(x, dy, dx, n);
}

template <typename T, typename F>
void binary_loop(F f, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb, T* out,
                 const StridedLayout& lo) {
  int64_t st[3][kMaxDims];
  const StridedLayout* ls[3] = {&lo, &la, &lb};
  layout_strides<3>(st, ls);
  nd_for_each_row<3>(lo.ndim, lo.sizes, st, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* o = out + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    if (in[0] == 1 && in[1] == 1 && in[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i], pb[i]);
    } else if (in[0] == 1 && in[1] == 1 && in[2] == 0) {
      const T vb = *pb;
      for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i], vb);
    } else if (in[0] == 1 && in[1] == 0 && in[2] == 1) {
      const T va = *pa;
      for (int64_t i = 0; i < n; ++i) o[i] = f(va, pb[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * in[0]] = f(pa[i * in[1]], pb[i * in[2]]);
    }
  });
}

/// Two-output backward loop: o1 = f1(a, b, g), o2 = f2(a, b, g); either output may be null.
template <typename T, typename FA, typename FB>
void backward2_loop(FA fa, FB fb, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb,
                    const T* dy, const StridedLayout& ldy, T* da, const StridedLayout& lda, T* db,
                    const StridedLayout& ldb) {
  int64_t st[5][kMaxDims];
  const StridedLayout* ls[5] = {&ldy, &la, &lb, da ? &lda : &ldy, db ? &ldb : &ldy};
  layout_strides<5>(st, ls);
  nd_for_each_row<5>(ldy.ndim, ldy.sizes, st, [&](const int64_t* off, int64_t n, const int64_t* in) {
    const T* g = dy + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    if (da) {
      T* o = da + off[3];
      for (int64_t i = 0; i < n; ++i) o[i * in[3]] = fa(pa[i * in[1]], pb[i * in[2]], g[i * in[0]]);
    }
    if (db) {
      T* o = db + off[4];
      for (int64_t i = 0; i < n; ++i) o[i * in[4]] = fb(pa[i * in[1]], pb[i * in[2]], g[i * in[0]]);
    }
  });
}

template <UnaryOp OP, typename T>
void unary_fwd_loop(T p0, T p1, const T* x, const StridedLayout& lx, T* out, const StridedLayout& lo) {
  int64_t st[2][kMaxDims];
  const StridedLayout* ls[2] = {&lo, &lx};
  layout_strides<2>(st, ls);
  nd_for_each_row<2>(lo.ndim, lo.sizes, st, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* o = out + off[0];
    const T* px = x + off[1];
    if (in[0] == 1 && in[1] == 1) {
      if constexpr (std::is_same_v<T, float> && OP == UnaryOp::Silu) {
        silu_f32(px, o, n);
      } else if constexpr (std::is_same_v<T, float> && OP == UnaryOp::Sigmoid) {
        sigmoid_f32(px, o, n);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = unary_fwd<T>(OP, px[i], p0, p1);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * in[0]] = unary_fwd<T>(OP, px[i * in[1]], p0, p1);
    }
  });
}

template <UnaryOp OP, typename T>
void unary_bwd_loop(T p0, T p1, const T* x, const StridedLayout& lx, const T* y, const StridedLayout& ly,
                    const T* dy, const StridedLayout& ldy, T* dx, const StridedLayout& ldx) {
  // A null operand is read through dy's pointer/layout (never used by the functor for that op).
  const T* xs = x ? x : dy;
  const T* ys = y ? y : dy;
  int64_t st[4][kMaxDims];
  const StridedLayout* ls[4] = {&ldx, x ? &lx : &ldy, y ? &ly : &ldy, &ldy};
  layout_strides<4>(st, ls);
  nd_for_each_row<4>(ldx.ndim, ldx.sizes, st, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* o = dx + off[0];
    const T* px = xs + off[1];
    const T* py = ys + off[2];
    const T* g = dy + off[3];
    if (in[0] == 1 && in[1] == 1 && in[2] == 1 && in[3] == 1) {
      if constexpr (std::is_same_v<T, float> && OP == UnaryOp::Silu) {
        silu_backward_f32(px, g, o, n);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = unary_bwd<T>(OP, px[i], py[i], g[i], p0, p1);
      }
    } else {
      for (int64_t i = 0; i < n; ++i)
        o[i * in[0]] = unary_bwd<T>(OP, px[i * in[1]], py[i * in[2]], g[i * in[3]], p0, p1);
    }
  });
}

// --- entries ----------------------------------------------------------------------------------------

void binary_forward(DeviceContext&, BinaryOp op, DType dt, void* out, const StridedLayout& lo, const void* a,
                    const StridedLayout& la, const void* b, const StridedLayout& lb) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    auto pa = static_cast<const T*>(a);
    auto pb = static_cast<const T*>(b);
    auto po = static_cast<T*>(out);
    switch (op) {
      case BinaryOp::Add: return binary_loop(AddOp{}, pa, la, pb, lb, po, lo);
      case BinaryOp::Sub: return binary_loop(SubOp{}, pa, la, pb, lb, po, lo);
      case BinaryOp::Mul: return binary_loop(MulOp{}, pa, la, pb, lb, po, lo);
      case BinaryOp::Div: return binary_loop(DivOp{}, pa, la, pb, lb, po, lo);
    }
  });
}

void binary_backward(DeviceContext&, BinaryOp op, DType dt, const void* a, const StridedLayout& la, const void* b,
                     const StridedLayout& lb, const void* dy, const StridedLayout& ldy, void* da,
                     const StridedLayout& lda, void* db, const StridedLayout& ldb) {
  Y9_ASSERT(op == BinaryOp::Mul || op == BinaryOp::Div, "binary_backward: only mul and div need a kernel, got ",
            binary_op_name(op));
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    auto pa = static_cast<const T*>(a);
    auto pb = static_cast<const T*>(b);
    auto pg = static_cast<const T*>(dy);
    if (op == BinaryOp::Mul)
      backward2_loop([](T x, T y, T g) { return mul_bwd_a(x, y, g); }, [](T x, T y, T g) { return mul_bwd_b(x, y, g); },
                     pa, la, pb, lb, pg, ldy, static_cast<T*>(da), lda, static_cast<T*>(db), ldb);
    else
      backward2_loop([](T x, T y, T g) { return div_bwd_a(x, y, g); }, [](T x, T y, T g) { return div_bwd_b(x, y, g); },
                     pa, la, pb, lb, pg, ldy, static_cast<T*>(da), lda, static_cast<T*>(db), ldb);
  });
}

void unary_forward(DeviceContext&, UnaryOp op, DType dt, double p0, double p1, void* out, const StridedLayout& lo,
                   const void* x, const StridedLayout& lx) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    visit_unary(op, [&](auto o) {
      unary_fwd_loop<decltype(o)::value, T>(static_cast<T>(p0), static_cast<T>(p1), static_cast<const T*>(x), lx,
                                            static_cast<T*>(out), lo);
    });
  });
}

void unary_backward(DeviceContext&, UnaryOp op, DType dt, double p0, double p1, void* dx, const StridedLayout& ldx,
                    const void* x, const StridedLayout& lx, const void* y, const StridedLayout& ly, const void* dy,
                    const StridedLayout& ldy) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    visit_unary(op, [&](auto o) {
      unary_bwd_loop<decltype(o)::value, T>(static_cast<T>(p0), static_cast<T>(p1), static_cast<const T*>(x), lx,
                                            static_cast<const T*>(y), ly, static_cast<const T*>(dy), ldy,
                                            static_cast<T*>(dx), ldx);
    });
  });
}

void bce_forward(DeviceContext&, DType dt, void* loss, const StridedLayout& ll, const void* x,
                 const StridedLayout& lx, const void* t, const StridedLayout& lt) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    binary_loop([](T a, T b) { return bce_with_logits_fwd(a, b); }, static_cast<const T*>(x), lx,
                static_cast<const T*>(t), lt, static_cast<T*>(loss), ll);
  });
}

void bce_backward(DeviceContext&, DType dt, const void* x, const StridedLayout& lx, const void* t,
                  const StridedLayout& lt, const void* dy, const StridedLayout& ldy, void* dx,
                  const StridedLayout& ldx, void* dt_out, const StridedLayout& ldt) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    backward2_loop([](T a, T b, T g) { return bce_with_logits_bwd_x(a, b, g); },
                   [](T a, T b, T g) { return bce_with_logits_bwd_t(a, b, g); }, static_cast<const T*>(x), lx,
                   static_cast<const T*>(t), lt, static_cast<const T*>(dy), ldy, static_cast<T*>(dx), ldx,
                   static_cast<T*>(dt_out), ldt);
  });
}

}  // namespace

void silu_rows_f32(const float* x, float* y, int64_t n) { silu_f32(x, y, n); }
void silu_backward_rows_f32(const float* x, const float* dy, float* dx, int64_t n) { silu_backward_f32(x, dy, dx, n); }

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kBinaryForward, &binary_forward, engine::kF32F64);
  b.add(kBinaryBackward, &binary_backward, engine::kF32F64);
  b.add(kUnaryForward, &unary_forward, engine::kF32F64);
  b.add(kUnaryBackward, &unary_backward, engine::kF32F64);
  b.add(kBceWithLogitsForward, &bce_forward, engine::kF32F64);
  b.add(kBceWithLogitsBackward, &bce_backward, engine::kF32F64);
}

}  // namespace kernels::cpu
