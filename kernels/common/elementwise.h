// Element math of the pointwise ops, shared by the CPU twins (kernels/cpu/elementwise.cpp) and the
// CUDA kernels (kernels/cuda/elementwise.cu), and their kernel entries. One enum per concept:
// BinaryOp (add, sub, mul, div with broadcasting) and UnaryOp (every one-input pointwise op, the
// activations included). Adding a unary op touches only this file and its ops/ function: the CPU
// and CUDA entries instantiate every UnaryOp through visit_unary. Functors compute in the scalar
// type T (float for F32/F16/BF16 on CUDA; float or double on the CPU).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/backend.h"
#include "engine/hd.h"
#include "kernels/common/rounding.h"
#include "kernels/common/strided.h"

namespace kernels {

// Device/host-neutral math wrappers (avoid <cmath> overload differences, guide 3.2).
Y9_HD float k_exp(float x) { return expf(x); }
Y9_HD double k_exp(double x) { return ::exp(x); }
Y9_HD float k_log(float x) { return logf(x); }
Y9_HD double k_log(double x) { return ::log(x); }
Y9_HD float k_log1p(float x) { return log1pf(x); }
Y9_HD double k_log1p(double x) { return ::log1p(x); }
Y9_HD float k_sqrt(float x) { return sqrtf(x); }
Y9_HD double k_sqrt(double x) { return ::sqrt(x); }
Y9_HD float k_pow(float x, float p) { return powf(x, p); }
Y9_HD double k_pow(double x, double p) { return ::pow(x, p); }
Y9_HD float k_abs(float x) { return fabsf(x); }
Y9_HD double k_abs(double x) { return ::fabs(x); }


/// v rounded to T (float or double) and back to double. On the host the T value goes through a
/// volatile: GCC 12's SLP vectorizer (-O3) can drop a `(double)(float)x` round trip in some lanes
/// of straight-line code (the host loss finishing it replaces was compiled that way).
template <typename T>
Y9_HD double k_round_to(double v) {
#if defined(__CUDA_ARCH__)
  return static_cast<double>(static_cast<T>(v));
#else
  volatile T r = static_cast<T>(v);
  return static_cast<double>(r);
#endif
}

// --- binary ---------------------------------------------------------------------------------------

enum class BinaryOp : int { Add = 0, Sub = 1, Mul = 2, Div = 3 };
inline const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
  }
  return "?";
}

struct AddOp { template <typename T> Y9_HD T operator()(T a, T b) const { return a + b; } };
struct SubOp { template <typename T> Y9_HD T operator()(T a, T b) const { return a - b; } };
struct MulOp { template <typename T> Y9_HD T operator()(T a, T b) const { return a * b; } };
struct DivOp { template <typename T> Y9_HD T operator()(T a, T b) const { return a / b; } };

/// mul: da = dy * b, db = dy * a.
template <typename T> Y9_HD T mul_bwd_a(T a, T b, T dy) { return dy * b; }
template <typename T> Y9_HD T mul_bwd_b(T a, T b, T dy) { return dy * a; }
/// div: da = dy / b, db = -dy * a / b^2.
template <typename T> Y9_HD T div_bwd_a(T a, T b, T dy) { return dy / b; }
template <typename T> Y9_HD T div_bwd_b(T a, T b, T dy) { return -dy * a / (b * b); }

// --- unary ----------------------------------------------------------------------------------------

/// Every one-input pointwise op; `p0`/`p1` are its scalar parameters (see each entry).
enum class UnaryOp : int {
  AddScalar = 0,  ///< x + p0
  MulScalar = 1,  ///< x * p0
  Neg = 2,        ///< -x
  Exp = 3,        ///< e^x
  Log = 4,        ///< ln x
  Sqrt = 5,       ///< sqrt(x)
  PowScalar = 6,  ///< x^p0
  Clamp = 7,      ///< min(max(x, p0), p1)
  Silu = 8,       ///< x * sigmoid(x) ("Sigmoid-Weighted Linear Units", Elfwing et al. 2018)
  Sigmoid = 9,    ///< 1 / (1 + e^-x)
  Relu = 10,      ///< max(x, 0)
  LeakyRelu = 11, ///< x > 0 ? x : p0 * x (nn.LeakyReLU(negative_slope = p0))
};

/// Calls f(std::integral_constant<UnaryOp, OP>{}) for the runtime `op`, so kernels instantiate a
/// switch-free loop per op. Lists every UnaryOp: the only place a new op must be added besides
/// its math below.
template <typename F>
inline decltype(auto) visit_unary(UnaryOp op, F&& f) {
  switch (op) {
    case UnaryOp::AddScalar: return f(std::integral_constant<UnaryOp, UnaryOp::AddScalar>{});
    case UnaryOp::MulScalar: return f(std::integral_constant<UnaryOp, UnaryOp::MulScalar>{});
    case UnaryOp::Neg: return f(std::integral_constant<UnaryOp, UnaryOp::Neg>{});
    case UnaryOp::Exp: return f(std::integral_constant<UnaryOp, UnaryOp::Exp>{});
    case UnaryOp::Log: return f(std::integral_constant<UnaryOp, UnaryOp::Log>{});
    case UnaryOp::Sqrt: return f(std::integral_constant<UnaryOp, UnaryOp::Sqrt>{});
    case UnaryOp::PowScalar: return f(std::integral_constant<UnaryOp, UnaryOp::PowScalar>{});
    case UnaryOp::Clamp: return f(std::integral_constant<UnaryOp, UnaryOp::Clamp>{});
    case UnaryOp::Silu: return f(std::integral_constant<UnaryOp, UnaryOp::Silu>{});
    case UnaryOp::Sigmoid: return f(std::integral_constant<UnaryOp, UnaryOp::Sigmoid>{});
    case UnaryOp::Relu: return f(std::integral_constant<UnaryOp, UnaryOp::Relu>{});
    case UnaryOp::LeakyRelu: break;
  }
  return f(std::integral_constant<UnaryOp, UnaryOp::LeakyRelu>{});
}

/// What a UnaryOp's backward reads besides dy: the forward input x, the forward output y, both or
/// neither (the op saves exactly these for backward).
struct UnarySaves {
  bool x = false, y = false;
};
constexpr UnarySaves unary_saves(UnaryOp op) {
  switch (op) {
    case UnaryOp::Exp: case UnaryOp::Sqrt: case UnaryOp::Sigmoid: return {false, true};
    case UnaryOp::Log: case UnaryOp::PowScalar: case UnaryOp::Clamp: case UnaryOp::Silu: case UnaryOp::Relu:
    case UnaryOp::LeakyRelu:
      return {true, false};
    default: return {false, false};
  }
}

template <typename T> Y9_HD T sigmoid_fwd(T x) { return T(1) / (T(1) + k_exp(-x)); }
template <typename T> Y9_HD T silu_fwd(T x) { return x * sigmoid_fwd(x); }

/// Forward of a UnaryOp in type T.
template <typename T>
Y9_HD T unary_fwd(UnaryOp op, T x, T p0, T p1) {
  switch (op) {
    case UnaryOp::AddScalar: return x + p0;
    case UnaryOp::MulScalar: return x * p0;
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return k_exp(x);
    case UnaryOp::Log: return k_log(x);
    case UnaryOp::Sqrt: return k_sqrt(x);
    case UnaryOp::PowScalar: return k_pow(x, p0);
    case UnaryOp::Clamp: return x < p0 ? p0 : (x > p1 ? p1 : x);
    case UnaryOp::Silu: return silu_fwd(x);
    case UnaryOp::Sigmoid: return sigmoid_fwd(x);
    case UnaryOp::Relu: return x > T(0) ? x : T(0);
    case UnaryOp::LeakyRelu: return x > T(0) ? x : p0 * x;
  }
  return x;
}

/// dx of a UnaryOp from the forward input x, forward output y and dy (only the ones
/// unary_saves() names are meaningful). pow: dy * p * x^(p-1) (0 when p == 0, as PyTorch);
/// clamp: dy on [lo, hi] (bounds included, PyTorch convention), else 0; sqrt: dy / (2 y);
/// exp: dy * y; log: dy / x; silu: dy * s(x) * (1 + x (1 - s(x))); sigmoid: dy * y * (1 - y);
/// relu: dy where x > 0; leaky relu: dy where x > 0, else p0 * dy (PyTorch: slope at 0).
template <typename T>
Y9_HD T unary_bwd(UnaryOp op, T x, T y, T dy, T p0, T p1) {
  switch (op) {
    case UnaryOp::AddScalar: return dy;
    case UnaryOp::MulScalar: return dy * p0;
    case UnaryOp::Neg: return -dy;
    case UnaryOp::Exp: return dy * y;
    case UnaryOp::Log: return dy / x;
    case UnaryOp::Sqrt: return dy / (T(2) * y);
    case UnaryOp::PowScalar: return p0 == T(0) ? T(0) : dy * p0 * k_pow(x, p0 - T(1));
    case UnaryOp::Clamp: return (x >= p0 && x <= p1) ? dy : T(0);
    case UnaryOp::Silu: {
      T s = sigmoid_fwd(x);
      return k_mul_rn(dy * s, T(1) + x * (T(1) - s));
    }
    case UnaryOp::Sigmoid: return dy * y * (T(1) - y);
    case UnaryOp::Relu: return x > T(0) ? dy : T(0);
    case UnaryOp::LeakyRelu: return x > T(0) ? dy : p0 * dy;
  }
  return dy;
}

// --- BCE with logits --------------------------------------------------------------------------------

/// BCE with logits, numerically stable: max(x,0) - x*t + log1p(exp(-|x|)).
template <typename T> Y9_HD T bce_with_logits_fwd(T x, T t) {
  return (x > T(0) ? x : T(0)) - x * t + k_log1p(k_exp(-k_abs(x)));
}
/// d/dx = dy * (sigmoid(x) - t); d/dt = -dy * x.
template <typename T> Y9_HD T bce_with_logits_bwd_x(T x, T t, T dy) { return dy * (sigmoid_fwd(x) - t); }
template <typename T> Y9_HD T bce_with_logits_bwd_t(T x, T t, T dy) { return -dy * x; }

// --- kernel entries ---------------------------------------------------------------------------------
// Common contract: every operand has the entry's dtype; the output layout gives the iteration
// shape and each input layout has the same sizes with stride 0 on broadcast dims
// (engine::layout_for); any strides; an output may alias an input only exactly; asynchronous on
// the context's compute stream; bitwise deterministic (no reductions).

/// out = a (op) b. Div follows IEEE (x/0 = +-inf, 0/0 = NaN).
using BinaryForwardFn = void (*)(engine::DeviceContext& ctx, BinaryOp op, engine::DType dtype, void* out,
                                 const StridedLayout& out_layout, const void* a, const StridedLayout& a_layout,
                                 const void* b, const StridedLayout& b_layout);
inline engine::KernelKey<BinaryForwardFn> kBinaryForward{"binary_forward"};

/// Backward of Mul/Div over dy's shape: da = d(a op b)/da * dy, db likewise, written in the
/// layouts da_layout/db_layout (dense over dy's shape; the op reduces broadcast dims with
/// engine::sum_to). da or db may be null (its layout is then ignored). Add/Sub need no kernel.
using BinaryBackwardFn = void (*)(engine::DeviceContext& ctx, BinaryOp op, engine::DType dtype, const void* a,
                                  const StridedLayout& a_layout, const void* b, const StridedLayout& b_layout,
                                  const void* dy, const StridedLayout& dy_layout, void* da,
                                  const StridedLayout& da_layout, void* db, const StridedLayout& db_layout);
inline engine::KernelKey<BinaryBackwardFn> kBinaryBackward{"binary_backward"};

/// out = unary_fwd(op, x, p0, p1).
using UnaryForwardFn = void (*)(engine::DeviceContext& ctx, UnaryOp op, engine::DType dtype, double p0, double p1,
                                void* out, const StridedLayout& out_layout, const void* x,
                                const StridedLayout& x_layout);
inline engine::KernelKey<UnaryForwardFn> kUnaryForward{"unary_forward"};

/// dx = unary_bwd(op, x, y, dy, p0, p1); x or y may be null when unary_saves(op) does not name it
/// (its layout is then ignored).
using UnaryBackwardFn = void (*)(engine::DeviceContext& ctx, UnaryOp op, engine::DType dtype, double p0, double p1,
                                 void* dx, const StridedLayout& dx_layout, const void* x,
                                 const StridedLayout& x_layout, const void* y, const StridedLayout& y_layout,
                                 const void* dy, const StridedLayout& dy_layout);
inline engine::KernelKey<UnaryBackwardFn> kUnaryBackward{"unary_backward"};

/// loss = bce_with_logits_fwd(x, t) (torch BCEWithLogitsLoss reduction='none', as the official
/// ComputeLoss uses it).
using BceWithLogitsForwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, void* loss,
                                        const StridedLayout& loss_layout, const void* x, const StridedLayout& x_layout,
                                        const void* t, const StridedLayout& t_layout);
inline engine::KernelKey<BceWithLogitsForwardFn> kBceWithLogitsForward{"bce_with_logits_forward"};

/// dx = dy * (sigmoid(x) - t), dt = -dy * x (either output may be null).
using BceWithLogitsBackwardFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, const void* x,
                                         const StridedLayout& x_layout, const void* t, const StridedLayout& t_layout,
                                         const void* dy, const StridedLayout& dy_layout, void* dx,
                                         const StridedLayout& dx_layout, void* dt, const StridedLayout& dt_layout);
inline engine::KernelKey<BceWithLogitsBackwardFn> kBceWithLogitsBackward{"bce_with_logits_backward"};

}  // namespace kernels
