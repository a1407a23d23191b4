// CPU twins of the box-loss pieces: element-wise CIoU (forward/backward) and DFL over
// positives (forward/backward). Math in kernels/common/box.h. Threaded with OpenMP.
#pragma once
#include <cstdint>

namespace kernels::cpu {

/// out[i] = CIoU(a[i], b[i]) for n xyxy box pairs (a, b: [n, 4] contiguous).
template <typename T>
void ciou_forward_cpu(const T* a, const T* b, T* out, int64_t n, double eps);
/// ga[i] = gout[i] * dCIoU/da[i], gb likewise (overwrites ga, gb; either may be null).
template <typename T>
void ciou_backward_cpu(const T* a, const T* b, const T* gout, T* ga, T* gb, int64_t n, double eps);

/// out[p] = mean over the 4 sides of DFL(logits[p, s, 0:nbins], target[p, s]); logits [P, 4, nbins],
/// target [P, 4] with values in [0, nbins - 1).
template <typename T>
void dfl_forward_cpu(const T* logits, const T* target, T* out, int64_t P, int nbins);
/// glogits[p, s, k] = gout[p] / 4 * dDFL_s/dlogits[k] (overwrites glogits).
template <typename T>
void dfl_backward_cpu(const T* logits, const T* target, const T* gout, T* glogits, int64_t P, int nbins);

}  // namespace kernels::cpu
