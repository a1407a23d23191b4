// CPU BatchNorm2d kernels over contiguous NCHW buffers, threaded over channels (each channel's
// reductions run in a fixed order, so results are bitwise reproducible for any thread count).
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// Per-channel batch mean and biased variance of x [n, c, hw] (accumulated in double, two-pass).
template <typename T>
void batch_norm_stats_cpu(const T* x, int64_t n, int64_t c, int64_t hw, T* mean, T* var_biased);

/// y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]; weight/bias may be null (1 and 0).
template <typename T>
void batch_norm_forward_cpu(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                            int64_t n, int64_t c, int64_t hw);

/// Backward of batch_norm_forward_cpu. With xhat = (x - mean) * invstd and M = n*hw:
/// dweight[c] = sum dy*xhat, dbias[c] = sum dy (each when non-null), and when dx is non-null:
///  training (statistics from this batch): dx = w*invstd/M * (M*dy - sum dy - xhat*sum dy*xhat);
///  eval (fixed running statistics):       dx = w*invstd*dy.
/// Source: Ioffe & Szegedy, "Batch Normalization" (ICML 2015), section 3 backward equations.
template <typename T>
void batch_norm_backward_cpu(const T* x, const T* dy, const T* mean, const T* invstd, const T* weight,
                             bool training, T* dx, T* dweight, T* dbias, int64_t n, int64_t c, int64_t hw);

/// invstd[c] = 1 / sqrt(var[c] + eps) (computed in double).
template <typename T>
void batch_norm_invstd_cpu(const T* var, double eps, T* invstd, int64_t c);

/// In place: running_mean = (1-momentum)*running_mean + momentum*mean,
/// running_var = (1-momentum)*running_var + momentum*var_biased*count/(count-1) (unbiased; PyTorch
/// BatchNorm convention; count = n*hw, the factor is 1 when count == 1).
template <typename T>
void batch_norm_update_running_cpu(const T* mean, const T* var_biased, int64_t count, double momentum,
                                   T* running_mean, T* running_var, int64_t c);

}  // namespace kernels::cpu
