// Element math of the arithmetic ops (scalar unary ops and the backward of binary ops), shared by
// the CPU twins (kernels/cpu/unary.cpp, binary.cpp) and the CUDA kernels. Kept apart from
// elementwise.h (activations) so both can grow independently; includes it for the k_* wrappers.
#pragma once
#include "kernels/common/elementwise.h"

namespace kernels {

/// Scalar unary ops; `p0`/`p1` are the op's scalar parameters (see each entry).
enum class UnaryOp : int {
  AddScalar = 0,  ///< x + p0
  MulScalar = 1,  ///< x * p0
  Neg = 2,        ///< -x
  Exp = 3,        ///< e^x
  Log = 4,        ///< ln x
  Sqrt = 5,       ///< sqrt(x)
  PowScalar = 6,  ///< x^p0
  Clamp = 7,      ///< min(max(x, p0), p1)
};

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
  }
  return x;
}

/// dx of a UnaryOp from the forward input x, forward output y and dy.
/// pow: dy * p * x^(p-1) (0 when p == 0, as PyTorch); clamp: dy on [lo, hi] (bounds included,
/// PyTorch convention), else 0; sqrt: dy / (2 y); exp: dy * y; log: dy / x.
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
  }
  return dy;
}

// --- binary backward (the forward functors AddOp..DivOp live in elementwise.h) ---------------
/// mul: da = dy * b, db = dy * a.
template <typename T> Y9_HD T mul_bwd_a(T a, T b, T dy) { return dy * b; }
template <typename T> Y9_HD T mul_bwd_b(T a, T b, T dy) { return dy * a; }
/// div: da = dy / b, db = -dy * a / b^2.
template <typename T> Y9_HD T div_bwd_a(T a, T b, T dy) { return dy / b; }
template <typename T> Y9_HD T div_bwd_b(T a, T b, T dy) { return -dy * a / (b * b); }

}  // namespace kernels
