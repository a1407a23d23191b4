// CUDA elementwise kernels: one generic N-input map kernel over strided (coalesced) layouts,
// instantiated per functor and dtype; a dense fast path skips index divisions. The element math
// is kernels/common/elementwise.h, shared with the CPU twins.
#include "kernels/cuda/elementwise.h"

#include <cuda_runtime.h>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/elementwise.h"
#include "kernels/cuda/common.cuh"

namespace kernels::cuda {

using engine::DType;

namespace {

template <typename T, int N>
struct Inputs {
  const T* p[N];
  StridedLayout l[N];
};

// 64-bit grid-stride loop; Dense: every operand is one contiguous run (offset == index).
template <typename T, int N, typename F, bool Dense>
__global__ void map_kernel(T* __restrict__ out, StridedLayout ol, Inputs<T, N> in, F f, int64_t n) {
  using S = Scalar<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    typename S::C v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = S::load(in.p[k][offset_of<Dense>(in.l[k], i)]);
    typename S::C r;
    if constexpr (N == 1) r = f(v[0]);
    else if constexpr (N == 2) r = f(v[0], v[1]);
    else r = f(v[0], v[1], v[2]);
    out[offset_of<Dense>(ol, i)] = S::store(r);
  }
}

template <int N, typename F>
void launch_map(const char* op, F f, void* out, DType dt, const StridedLayout& out_layout,
                const void* const* ins, const StridedLayout* in_layouts, cudaStream_t stream) {
  const int64_t n = layout_numel(out_layout);
  if (n == 0) {
    Y9_CHECK_SHAPE(engine::is_floating(dt), op, ": dtype ", engine::dtype_name(dt), " not supported on cuda");
    return;
  }
  StridedLayout ls[N + 1];
  ls[0] = out_layout;
  for (int k = 0; k < N; ++k) ls[k + 1] = in_layouts[k];
  coalesce(ls, N + 1);
  bool dense = true;
  for (int k = 0; k <= N; ++k) dense = dense && is_dense(ls[k]);
  bool ok = dispatch_float(dt, [&]<typename T>() {
    Inputs<T, N> in;
    for (int k = 0; k < N; ++k) {
      in.p[k] = static_cast<const T*>(ins[k]);
      in.l[k] = ls[k + 1];
    }
    if (dense)
      map_kernel<T, N, F, true><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(out), ls[0], in, f, n);
    else
      map_kernel<T, N, F, false><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(out), ls[0], in, f, n);
    CUDA_CHECK_LAUNCH(stream);
  });
  Y9_CHECK_SHAPE(ok, op, ": dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64, f16, bf16)");
}

// --- functors over the shared element math ---------------------------------------------------

template <typename Op>
struct BinaryF {
  template <typename C> __device__ C operator()(C a, C b) const { return Op()(a, b); }
};
struct SiluF { template <typename C> __device__ C operator()(C x) const { return silu_fwd(x); } };
struct SiluBwdF { template <typename C> __device__ C operator()(C x, C dy) const { return silu_bwd(x, dy); } };
struct SigmoidF { template <typename C> __device__ C operator()(C x) const { return sigmoid_fwd(x); } };
struct SigmoidBwdF {
  template <typename C> __device__ C operator()(C y, C dy) const { return sigmoid_bwd_from_y(y, dy); }
};
struct ReluF { template <typename C> __device__ C operator()(C x) const { return relu_fwd(x); } };
struct ReluBwdF { template <typename C> __device__ C operator()(C x, C dy) const { return relu_bwd(x, dy); } };
struct BceF { template <typename C> __device__ C operator()(C x, C t) const { return bce_with_logits_fwd(x, t); } };
struct BceBwdF {
  template <typename C> __device__ C operator()(C x, C t, C dy) const { return bce_with_logits_bwd_x(x, t, dy); }
};

}  // namespace

// --- launchers --------------------------------------------------------------------------------

void binary_forward_cuda(BinaryOp op, void* out, DType dt, const StridedLayout& out_layout, const void* a,
                         const StridedLayout& a_layout, const void* b, const StridedLayout& b_layout,
                         cudaStream_t stream) {
  const void* ins[2] = {a, b};
  StridedLayout ls[2] = {a_layout, b_layout};
  switch (op) {
    case BinaryOp::Add: return launch_map<2>("add", BinaryF<AddOp>{}, out, dt, out_layout, ins, ls, stream);
    case BinaryOp::Sub: return launch_map<2>("sub", BinaryF<SubOp>{}, out, dt, out_layout, ins, ls, stream);
    case BinaryOp::Mul: return launch_map<2>("mul", BinaryF<MulOp>{}, out, dt, out_layout, ins, ls, stream);
    case BinaryOp::Div: return launch_map<2>("div", BinaryF<DivOp>{}, out, dt, out_layout, ins, ls, stream);
  }
}

void silu_forward_cuda(void* y, DType dt, const StridedLayout& yl, const void* x, const StridedLayout& xl,
                       cudaStream_t stream) {
  launch_map<1>("silu", SiluF{}, y, dt, yl, &x, &xl, stream);
}
void silu_backward_cuda(void* dx, DType dt, const StridedLayout& dxl, const void* x, const StridedLayout& xl,
                        const void* dy, const StridedLayout& dyl, cudaStream_t stream) {
  const void* ins[2] = {x, dy};
  StridedLayout ls[2] = {xl, dyl};
  launch_map<2>("silu_backward", SiluBwdF{}, dx, dt, dxl, ins, ls, stream);
}
void sigmoid_forward_cuda(void* y, DType dt, const StridedLayout& yl, const void* x, const StridedLayout& xl,
                          cudaStream_t stream) {
  launch_map<1>("sigmoid", SigmoidF{}, y, dt, yl, &x, &xl, stream);
}
void sigmoid_backward_cuda(void* dx, DType dt, const StridedLayout& dxl, const void* y, const StridedLayout& yl,
                           const void* dy, const StridedLayout& dyl, cudaStream_t stream) {
  const void* ins[2] = {y, dy};
  StridedLayout ls[2] = {yl, dyl};
  launch_map<2>("sigmoid_backward", SigmoidBwdF{}, dx, dt, dxl, ins, ls, stream);
}
void relu_forward_cuda(void* y, DType dt, const StridedLayout& yl, const void* x, const StridedLayout& xl,
                       cudaStream_t stream) {
  launch_map<1>("relu", ReluF{}, y, dt, yl, &x, &xl, stream);
}
void relu_backward_cuda(void* dx, DType dt, const StridedLayout& dxl, const void* x, const StridedLayout& xl,
                        const void* dy, const StridedLayout& dyl, cudaStream_t stream) {
  const void* ins[2] = {x, dy};
  StridedLayout ls[2] = {xl, dyl};
  launch_map<2>("relu_backward", ReluBwdF{}, dx, dt, dxl, ins, ls, stream);
}
void bce_with_logits_forward_cuda(void* loss, DType dt, const StridedLayout& ll, const void* x,
                                  const StridedLayout& xl, const void* t, const StridedLayout& tl,
                                  cudaStream_t stream) {
  const void* ins[2] = {x, t};
  StridedLayout ls[2] = {xl, tl};
  launch_map<2>("bce_with_logits", BceF{}, loss, dt, ll, ins, ls, stream);
}
void bce_with_logits_backward_cuda(void* dx, DType dt, const StridedLayout& dxl, const void* x,
                                   const StridedLayout& xl, const void* t, const StridedLayout& tl, const void* dy,
                                   const StridedLayout& dyl, cudaStream_t stream) {
  const void* ins[3] = {x, t, dy};
  StridedLayout ls[3] = {xl, tl, dyl};
  launch_map<3>("bce_with_logits_backward", BceBwdF{}, dx, dt, dxl, ins, ls, stream);
}

}  // namespace kernels::cuda
