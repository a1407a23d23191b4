// CPU twins of the CIoU and DFL entries (kernels/common/box_loss.h): loops over its shared math.
#include "kernels/common/box_loss.h"
#include "kernels/cpu/dispatch.h"

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

namespace {

using engine::DeviceContext;
using engine::DType;

void ciou_fwd_entry(DeviceContext&, DType dt, const void* a, const void* b, void* out, int64_t n, double eps) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    ciou_forward_cpu(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, eps);
  });
}
void ciou_bwd_entry(DeviceContext&, DType dt, const void* a, const void* b, const void* gout, void* ga, void* gb,
                    int64_t n, double eps) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    ciou_backward_cpu(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(gout),
                      static_cast<T*>(ga), static_cast<T*>(gb), n, eps);
  });
}
void dfl_fwd_entry(DeviceContext&, DType dt, const void* logits, const void* target, void* out, int64_t P,
                   int nbins) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    dfl_forward_cpu(static_cast<const T*>(logits), static_cast<const T*>(target), static_cast<T*>(out), P, nbins);
  });
}
void dfl_bwd_entry(DeviceContext&, DType dt, const void* logits, const void* target, const void* gout, void* glogits,
                   int64_t P, int nbins) {
  float_or_double(dt, [&](auto t) {
    using T = decltype(t);
    dfl_backward_cpu(static_cast<const T*>(logits), static_cast<const T*>(target), static_cast<const T*>(gout),
                     static_cast<T*>(glogits), P, nbins);
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kCiouForward, &ciou_fwd_entry, engine::kF32F64);
  b.add(kCiouBackward, &ciou_bwd_entry, engine::kF32F64);
  b.add(kDflForward, &dfl_fwd_entry, engine::kF32F64);
  b.add(kDflBackward, &dfl_bwd_entry, engine::kF32F64);
}

}  // namespace kernels::cpu
