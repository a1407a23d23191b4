// CPU twins of the activation and BCE-with-logits kernels (math in kernels/common/elementwise.h).
// Contiguous buffers of n elements, T = float or double; threaded with OpenMP over elements.
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// y = x * sigmoid(x).
template <typename T> void silu_forward_cpu(const T* x, T* y, int64_t n);
/// dx = dy * s(x) * (1 + x * (1 - s(x))).
template <typename T> void silu_backward_cpu(const T* x, const T* dy, T* dx, int64_t n);
/// y = 1 / (1 + exp(-x)).
template <typename T> void sigmoid_forward_cpu(const T* x, T* y, int64_t n);
/// dx = dy * y * (1 - y), from the forward output y.
template <typename T> void sigmoid_backward_cpu(const T* y, const T* dy, T* dx, int64_t n);
/// y = max(x, 0).
template <typename T> void relu_forward_cpu(const T* x, T* y, int64_t n);
/// dx = dy where x > 0, else 0.
template <typename T> void relu_backward_cpu(const T* x, const T* dy, T* dx, int64_t n);
/// y = max(x,0) - x*t + log1p(exp(-|x|)).
template <typename T> void bce_with_logits_forward_cpu(const T* x, const T* t, T* y, int64_t n);
/// dx = dy * (sigmoid(x) - t) (when dx != nullptr); dt = -dy * x (when dt != nullptr).
template <typename T>
void bce_with_logits_backward_cpu(const T* x, const T* t, const T* dy, T* dx, T* dt, int64_t n);

}  // namespace kernels::cpu
