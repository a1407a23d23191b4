// Arithmetic rounded once per operation, on every backend: a * b and a + b that the GPU compiler
// may not contract into an FMA, and an explicit FMA. nvcc contracts `a * b + c` by default (NVVM
// into fma.rn, ptxas a plain mul.f32 feeding an add.f32 into FFMA), while the host code that
// device kernels reproduce bit for bit (the loss finishing, the gradient norm, OpenCV's SSE2
// augmentation math) does not; and which product of `a*b + c*d` gets contracted can differ
// between two instantiations of one expression (the fused BN + SiLU backward's dx, H200). Host
// builds (the emulator's included) use the plain operators and the C library's exact fma.
#pragma once

#include <math.h>

#include "engine/hd.h"

namespace kernels {

Y9_HD double k_mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
Y9_HD float k_mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
Y9_HD double k_add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
Y9_HD float k_add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
/// a * b + c with one rounding (fmaf / fma): leaves the compiler no choice of which product of a
/// sum to contract.
Y9_HD float k_fma(float a, float b, float c) { return fmaf(a, b, c); }
Y9_HD double k_fma(double a, double b, double c) { return ::fma(a, b, c); }

}  // namespace kernels
