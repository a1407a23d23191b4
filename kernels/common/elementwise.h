// Element math shared by the CPU twins (kernels/cpu) and the CUDA kernels (kernels/cuda).
// Each functor computes in the scalar type T (float on CUDA for F32/F16/BF16, float or double
// on the CPU). Backward functors take the forward input (and output where cheaper) and dy.
#pragma once
#include <cmath>

#include "engine/hd.h"

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

// --- binary ---------------------------------------------------------------------------------
struct AddOp { template <typename T> Y9_HD T operator()(T a, T b) const { return a + b; } };
struct SubOp { template <typename T> Y9_HD T operator()(T a, T b) const { return a - b; } };
struct MulOp { template <typename T> Y9_HD T operator()(T a, T b) const { return a * b; } };
struct DivOp { template <typename T> Y9_HD T operator()(T a, T b) const { return a / b; } };

// --- unary forward ----------------------------------------------------------------------------
template <typename T> Y9_HD T sigmoid_fwd(T x) { return T(1) / (T(1) + k_exp(-x)); }
template <typename T> Y9_HD T silu_fwd(T x) { return x * sigmoid_fwd(x); }
template <typename T> Y9_HD T relu_fwd(T x) { return x > T(0) ? x : T(0); }

// --- unary backward: dx from x (forward input) and dy ------------------------------------------
/// d/dx x*s(x) = s(x) * (1 + x*(1 - s(x))).
template <typename T> Y9_HD T silu_bwd(T x, T dy) {
  T s = sigmoid_fwd(x);
  return dy * s * (T(1) + x * (T(1) - s));
}
/// From the forward output y = s(x): dy * y * (1 - y).
template <typename T> Y9_HD T sigmoid_bwd_from_y(T y, T dy) { return dy * y * (T(1) - y); }
template <typename T> Y9_HD T relu_bwd(T x, T dy) { return x > T(0) ? dy : T(0); }

/// BCE with logits, numerically stable: max(x,0) - x*t + log1p(exp(-|x|)).
template <typename T> Y9_HD T bce_with_logits_fwd(T x, T t) {
  return (x > T(0) ? x : T(0)) - x * t + k_log1p(k_exp(-k_abs(x)));
}
/// d/dx = sigmoid(x) - t; d/dt = -x.
template <typename T> Y9_HD T bce_with_logits_bwd_x(T x, T t, T dy) { return dy * (sigmoid_fwd(x) - t); }

}  // namespace kernels
