// CPU twins of CIoU and DFL (kernels/cpu/box.h): loops over kernels/common/box.h.
#include "kernels/cpu/box_loss.h"

#include "kernels/common/box_loss.h"

namespace kernels::cpu {

template <typename T>
void ciou_forward_cpu(const T* a, const T* b, T* out, int64_t n, double eps) {
#pragma omp parallel for schedule(static) if (n > 4096)
  for (int64_t i = 0; i < n; ++i) out[i] = ciou_fwd<T>(a + 4 * i, b + 4 * i, static_cast<T>(eps));
}

template <typename T>
void ciou_backward_cpu(const T* a, const T* b, const T* gout, T* ga, T* gb, int64_t n, double eps) {
#pragma omp parallel for schedule(static) if (n > 4096)
  for (int64_t i = 0; i < n; ++i) {
    T la[4] = {0, 0, 0, 0}, lb[4] = {0, 0, 0, 0};
    ciou_bwd<T>(a + 4 * i, b + 4 * i, static_cast<T>(eps), gout[i], la, lb);
    for (int k = 0; k < 4; ++k) {
      if (ga) ga[4 * i + k] = la[k];
      if (gb) gb[4 * i + k] = lb[k];
    }
  }
}

template <typename T>
void dfl_forward_cpu(const T* logits, const T* target, T* out, int64_t P, int nbins) {
#pragma omp parallel for schedule(static) if (P > 1024)
  for (int64_t p = 0; p < P; ++p) {
    T s = T(0);
    for (int k = 0; k < 4; ++k) s += dfl_side_fwd<T>(logits + (p * 4 + k) * nbins, nbins, target[p * 4 + k]);
    out[p] = s / T(4);
  }
}

template <typename T>
void dfl_backward_cpu(const T* logits, const T* target, const T* gout, T* glogits, int64_t P, int nbins) {
#pragma omp parallel for schedule(static) if (P > 1024)
  for (int64_t p = 0; p < P; ++p) {
    for (int k = 0; k < 4; ++k) {
      T* g = glogits + (p * 4 + k) * nbins;
      for (int j = 0; j < nbins; ++j) g[j] = T(0);
      dfl_side_bwd<T>(logits + (p * 4 + k) * nbins, nbins, target[p * 4 + k], gout[p] / T(4), g);
    }
  }
}

#define Y9_INST(T)                                                                             \
  template void ciou_forward_cpu<T>(const T*, const T*, T*, int64_t, double);                  \
  template void ciou_backward_cpu<T>(const T*, const T*, const T*, T*, T*, int64_t, double);   \
  template void dfl_forward_cpu<T>(const T*, const T*, T*, int64_t, int);                      \
  template void dfl_backward_cpu<T>(const T*, const T*, const T*, T*, int64_t, int);
Y9_INST(float)
Y9_INST(double)
#undef Y9_INST

}  // namespace kernels::cpu
