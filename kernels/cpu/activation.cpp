// CPU activation kernels: loops over the shared element math of kernels/common/elementwise.h.
#include "kernels/cpu/activation.h"

#include "kernels/common/elementwise.h"

namespace kernels::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;
}

template <typename T> void silu_forward_cpu(const T* x, T* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = silu_fwd(x[i]);
}
template <typename T> void silu_backward_cpu(const T* x, const T* dy, T* dx, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) dx[i] = silu_bwd(x[i], dy[i]);
}
template <typename T> void sigmoid_forward_cpu(const T* x, T* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid_fwd(x[i]);
}
template <typename T> void sigmoid_backward_cpu(const T* y, const T* dy, T* dx, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) dx[i] = sigmoid_bwd_from_y(y[i], dy[i]);
}
template <typename T> void relu_forward_cpu(const T* x, T* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = relu_fwd(x[i]);
}
template <typename T> void relu_backward_cpu(const T* x, const T* dy, T* dx, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) dx[i] = relu_bwd(x[i], dy[i]);
}
template <typename T> void bce_with_logits_forward_cpu(const T* x, const T* t, T* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = bce_with_logits_fwd(x[i], t[i]);
}
template <typename T>
void bce_with_logits_backward_cpu(const T* x, const T* t, const T* dy, T* dx, T* dt, int64_t n) {
  if (dx) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
    for (int64_t i = 0; i < n; ++i) dx[i] = bce_with_logits_bwd_x(x[i], t[i], dy[i]);
  }
  if (dt) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
    for (int64_t i = 0; i < n; ++i) dt[i] = -dy[i] * x[i];
  }
}

#define Y9_INSTANTIATE(T)                                                                   \
  template void silu_forward_cpu<T>(const T*, T*, int64_t);                                 \
  template void silu_backward_cpu<T>(const T*, const T*, T*, int64_t);                      \
  template void sigmoid_forward_cpu<T>(const T*, T*, int64_t);                              \
  template void sigmoid_backward_cpu<T>(const T*, const T*, T*, int64_t);                   \
  template void relu_forward_cpu<T>(const T*, T*, int64_t);                                 \
  template void relu_backward_cpu<T>(const T*, const T*, T*, int64_t);                      \
  template void bce_with_logits_forward_cpu<T>(const T*, const T*, T*, int64_t);            \
  template void bce_with_logits_backward_cpu<T>(const T*, const T*, const T*, T*, T*, int64_t);
Y9_INSTANTIATE(float)
Y9_INSTANTIATE(double)
#undef Y9_INSTANTIATE

}  // namespace kernels::cpu
