// CUDA elementwise entries: one generic N-input map kernel over strided (coalesced) layouts,
// instantiated per functor and dtype; a dense fast path skips index divisions. The element math
// is kernels/common/elementwise.h, shared with the CPU twins; every UnaryOp is instantiated
// through visit_unary, so a new unary op needs no edit here.

#include <cuda_runtime.h>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/elementwise.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

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
      Y9_LAUNCH(map_kernel<T, N, F, true>, grid_for(n), kBlock, 0, stream, static_cast<T*>(out), ls[0], in, f, n);
    else
      Y9_LAUNCH(map_kernel<T, N, F, false>, grid_for(n), kBlock, 0, stream, static_cast<T*>(out), ls[0], in, f, n);
  });
  Y9_CHECK_SHAPE(ok, op, ": dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64, f16, bf16)");
}

// --- functors over the shared element math ---------------------------------------------------

template <typename Op>
struct BinaryF {
  template <typename C> __device__ C operator()(C a, C b) const { return Op()(a, b); }
};
template <BinaryOp OP, bool A>
struct BinaryBwdF {  // A: gradient of the first operand, else of the second
  template <typename C> __device__ C operator()(C a, C b, C dy) const {
    if constexpr (OP == BinaryOp::Mul) return A ? mul_bwd_a(a, b, dy) : mul_bwd_b(a, b, dy);
    else return A ? div_bwd_a(a, b, dy) : div_bwd_b(a, b, dy);
  }
};
template <UnaryOp OP>
struct UnaryF {
  double p0, p1;
  template <typename C> __device__ C operator()(C x) const { return unary_fwd<C>(OP, x, C(p0), C(p1)); }
};
template <UnaryOp OP>
struct UnaryBwdF {
  double p0, p1;
  template <typename C> __device__ C operator()(C x, C y, C dy) const {
    return unary_bwd<C>(OP, x, y, dy, C(p0), C(p1));
  }
};
struct BceF { template <typename C> __device__ C operator()(C x, C t) const { return bce_with_logits_fwd(x, t); } };
struct BceBwdXF {
  template <typename C> __device__ C operator()(C x, C t, C dy) const { return bce_with_logits_bwd_x(x, t, dy); }
};
struct BceBwdTF {
  template <typename C> __device__ C operator()(C x, C t, C dy) const { return bce_with_logits_bwd_t(x, t, dy); }
};

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

// --- entries ----------------------------------------------------------------------------------

void binary_forward(engine::DeviceContext& ctx, BinaryOp op, DType dt, void* out, const StridedLayout& out_layout,
                    const void* a, const StridedLayout& a_layout, const void* b, const StridedLayout& b_layout) {
  const void* ins[2] = {a, b};
  StridedLayout ls[2] = {a_layout, b_layout};
  cudaStream_t s = stream_of(ctx);
  switch (op) {
    case BinaryOp::Add: return launch_map<2>("add", BinaryF<AddOp>{}, out, dt, out_layout, ins, ls, s);
    case BinaryOp::Sub: return launch_map<2>("sub", BinaryF<SubOp>{}, out, dt, out_layout, ins, ls, s);
    case BinaryOp::Mul: return launch_map<2>("mul", BinaryF<MulOp>{}, out, dt, out_layout, ins, ls, s);
    case BinaryOp::Div: return launch_map<2>("div", BinaryF<DivOp>{}, out, dt, out_layout, ins, ls, s);
  }
}

void binary_backward(engine::DeviceContext& ctx, BinaryOp op, DType dt, const void* a, const StridedLayout& la,
                     const void* b, const StridedLayout& lb, const void* dy, const StridedLayout& ldy, void* da,
                     const StridedLayout& lda, void* db, const StridedLayout& ldb) {
  const void* ins[3] = {a, b, dy};
  StridedLayout ls[3] = {la, lb, ldy};
  cudaStream_t s = stream_of(ctx);
  if (op == BinaryOp::Mul) {
    if (da) launch_map<3>("mul backward", BinaryBwdF<BinaryOp::Mul, true>{}, da, dt, lda, ins, ls, s);
    if (db) launch_map<3>("mul backward", BinaryBwdF<BinaryOp::Mul, false>{}, db, dt, ldb, ins, ls, s);
  } else {
    Y9_ASSERT(op == BinaryOp::Div, "binary_backward: only mul and div need a kernel, got ", binary_op_name(op));
    if (da) launch_map<3>("div backward", BinaryBwdF<BinaryOp::Div, true>{}, da, dt, lda, ins, ls, s);
    if (db) launch_map<3>("div backward", BinaryBwdF<BinaryOp::Div, false>{}, db, dt, ldb, ins, ls, s);
  }
}

void unary_forward(engine::DeviceContext& ctx, UnaryOp op, DType dt, double p0, double p1, void* out,
                   const StridedLayout& lo, const void* x, const StridedLayout& lx) {
  visit_unary(op, [&](auto o) {
    launch_map<1>("unary", UnaryF<decltype(o)::value>{p0, p1}, out, dt, lo, &x, &lx, stream_of(ctx));
  });
}

void unary_backward(engine::DeviceContext& ctx, UnaryOp op, DType dt, double p0, double p1, void* dx,
                    const StridedLayout& ldx, const void* x, const StridedLayout& lx, const void* y,
                    const StridedLayout& ly, const void* dy, const StridedLayout& ldy) {
  // A null operand is read through dy's pointer/layout (the functor ignores it for that op).
  const void* ins[3] = {x ? x : dy, y ? y : dy, dy};
  StridedLayout ls[3] = {x ? lx : ldy, y ? ly : ldy, ldy};
  visit_unary(op, [&](auto o) {
    launch_map<3>("unary backward", UnaryBwdF<decltype(o)::value>{p0, p1}, dx, dt, ldx, ins, ls, stream_of(ctx));
  });
}

void bce_forward(engine::DeviceContext& ctx, DType dt, void* loss, const StridedLayout& ll, const void* x,
                 const StridedLayout& xl, const void* t, const StridedLayout& tl) {
  const void* ins[2] = {x, t};
  StridedLayout ls[2] = {xl, tl};
  launch_map<2>("bce_with_logits", BceF{}, loss, dt, ll, ins, ls, stream_of(ctx));
}

void bce_backward(engine::DeviceContext& ctx, DType dt, const void* x, const StridedLayout& xl, const void* t,
                  const StridedLayout& tl, const void* dy, const StridedLayout& dyl, void* dx,
                  const StridedLayout& dxl, void* dtt, const StridedLayout& dtl) {
  const void* ins[3] = {x, t, dy};
  StridedLayout ls[3] = {xl, tl, dyl};
  if (dx) launch_map<3>("bce_with_logits backward", BceBwdXF{}, dx, dt, dxl, ins, ls, stream_of(ctx));
  if (dtt) launch_map<3>("bce_with_logits backward", BceBwdTF{}, dtt, dt, dtl, ins, ls, stream_of(ctx));
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kBinaryForward, &binary_forward, engine::kFloating);
  b.add(kBinaryBackward, &binary_backward, engine::kFloating);
  b.add(kUnaryForward, &unary_forward, engine::kFloating);
  b.add(kUnaryBackward, &unary_backward, engine::kFloating);
  b.add(kBceWithLogitsForward, &bce_forward, engine::kFloating);
  b.add(kBceWithLogitsBackward, &bce_backward, engine::kFloating);
}

}  // namespace kernels::cuda
