// CPU twins of add/sub/mul/div and the scalar unary ops. The op is turned into a template
// parameter outside the loops so the inner loop is a switch-free, vectorisable body; contiguous
// and broadcast-scalar inner strides get their own loops for the same reason.
#include "kernels/cpu/elementwise_ops.h"

#include "kernels/cpu/nd_iter.h"

namespace kernels::cpu {

namespace {

template <int N>
void fill_strides(int64_t (*st)[kMaxDims], const StridedLayout* const* ls) {
  for (int k = 0; k < N; ++k)
    for (int d = 0; d < ls[0]->ndim; ++d) st[k][d] = ls[k]->strides[d];
}

template <typename T, typename F>
void binary_loop(F f, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb, T* out,
                 const StridedLayout& lo) {
  int64_t st[3][kMaxDims];
  const StridedLayout* ls[3] = {&lo, &la, &lb};
  fill_strides<3>(st, ls);
  nd_for_each_row<3>(lo.ndim, lo.sizes, st, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* o = out + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    if (in[0] == 1 && in[1] == 1 && in[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i], pb[i]);
    } else if (in[0] == 1 && in[1] == 1 && in[2] == 0) {
      const T vb = *pb;
      for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i], vb);
    } else if (in[0] == 1 && in[1] == 0 && in[2] == 1) {
      const T va = *pa;
      for (int64_t i = 0; i < n; ++i) o[i] = f(va, pb[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * in[0]] = f(pa[i * in[1]], pb[i * in[2]]);
    }
  });
}

template <typename T, typename FA, typename FB>
void binary_bwd_loop(FA fa, FB fb, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb,
                     const T* dy, const StridedLayout& ldy, T* da, const StridedLayout& lda, T* db,
                     const StridedLayout& ldb) {
  int64_t st[5][kMaxDims];
  const StridedLayout* ls[5] = {&ldy, &la, &lb, da ? &lda : &ldy, db ? &ldb : &ldy};
  fill_strides<5>(st, ls);
  nd_for_each_row<5>(ldy.ndim, ldy.sizes, st, [&](const int64_t* off, int64_t n, const int64_t* in) {
    const T* g = dy + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    if (da) {
      T* o = da + off[3];
      for (int64_t i = 0; i < n; ++i) o[i * in[3]] = fa(pa[i * in[1]], pb[i * in[2]], g[i * in[0]]);
    }
    if (db) {
      T* o = db + off[4];
      for (int64_t i = 0; i < n; ++i) o[i * in[4]] = fb(pa[i * in[1]], pb[i * in[2]], g[i * in[0]]);
    }
  });
}

template <UnaryOp OP, typename T>
void unary_fwd_loop(T p0, T p1, const T* x, const StridedLayout& lx, T* out, const StridedLayout& lo) {
  int64_t st[2][kMaxDims];
  const StridedLayout* ls[2] = {&lo, &lx};
  fill_strides<2>(st, ls);
  nd_for_each_row<2>(lo.ndim, lo.sizes, st, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* o = out + off[0];
    const T* px = x + off[1];
    if (in[0] == 1 && in[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = unary_fwd<T>(OP, px[i], p0, p1);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * in[0]] = unary_fwd<T>(OP, px[i * in[1]], p0, p1);
    }
  });
}

template <UnaryOp OP, typename T>
void unary_bwd_loop(T p0, T p1, const T* x, const StridedLayout& lx, const T* y, const StridedLayout& ly,
                    const T* dy, const StridedLayout& ldy, T* dx, const StridedLayout& ldx) {
  // A null operand is read through dy's pointer/layout (never used by the functor for that op).
  const T* xs = x ? x : dy;
  const T* ys = y ? y : dy;
  int64_t st[4][kMaxDims];
  const StridedLayout* ls[4] = {&ldx, x ? &lx : &ldy, y ? &ly : &ldy, &ldy};
  fill_strides<4>(st, ls);
  nd_for_each_row<4>(ldx.ndim, ldx.sizes, st, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* o = dx + off[0];
    const T* px = xs + off[1];
    const T* py = ys + off[2];
    const T* g = dy + off[3];
    for (int64_t i = 0; i < n; ++i) o[i * in[0]] = unary_bwd<T>(OP, px[i * in[1]], py[i * in[2]], g[i * in[3]], p0, p1);
  });
}

#define Y9_UNARY_DISPATCH(OPV, FN, ...)                                     \
  switch (OPV) {                                                            \
    case UnaryOp::AddScalar: return FN<UnaryOp::AddScalar>(__VA_ARGS__);    \
    case UnaryOp::MulScalar: return FN<UnaryOp::MulScalar>(__VA_ARGS__);    \
    case UnaryOp::Neg: return FN<UnaryOp::Neg>(__VA_ARGS__);                \
    case UnaryOp::Exp: return FN<UnaryOp::Exp>(__VA_ARGS__);                \
    case UnaryOp::Log: return FN<UnaryOp::Log>(__VA_ARGS__);                \
    case UnaryOp::Sqrt: return FN<UnaryOp::Sqrt>(__VA_ARGS__);              \
    case UnaryOp::PowScalar: return FN<UnaryOp::PowScalar>(__VA_ARGS__);    \
    case UnaryOp::Clamp: return FN<UnaryOp::Clamp>(__VA_ARGS__);            \
  }

}  // namespace

template <typename T>
void binary_forward_cpu(BinaryOp op, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb,
                        T* out, const StridedLayout& lo) {
  switch (op) {
    case BinaryOp::Add: return binary_loop(AddOp{}, a, la, b, lb, out, lo);
    case BinaryOp::Sub: return binary_loop(SubOp{}, a, la, b, lb, out, lo);
    case BinaryOp::Mul: return binary_loop(MulOp{}, a, la, b, lb, out, lo);
    case BinaryOp::Div: return binary_loop(DivOp{}, a, la, b, lb, out, lo);
  }
}

template <typename T>
void binary_backward_cpu(BinaryOp op, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb,
                         const T* dy, const StridedLayout& ldy, T* da, const StridedLayout& lda, T* db,
                         const StridedLayout& ldb) {
  if (op == BinaryOp::Mul) {
    binary_bwd_loop([](T x, T y, T g) { return mul_bwd_a(x, y, g); }, [](T x, T y, T g) { return mul_bwd_b(x, y, g); },
                    a, la, b, lb, dy, ldy, da, lda, db, ldb);
  } else {
    binary_bwd_loop([](T x, T y, T g) { return div_bwd_a(x, y, g); }, [](T x, T y, T g) { return div_bwd_b(x, y, g); },
                    a, la, b, lb, dy, ldy, da, lda, db, ldb);
  }
}

template <typename T>
void unary_forward_cpu(UnaryOp op, T p0, T p1, const T* x, const StridedLayout& lx, T* out, const StridedLayout& lo) {
  Y9_UNARY_DISPATCH(op, unary_fwd_loop, p0, p1, x, lx, out, lo)
}

template <typename T>
void unary_backward_cpu(UnaryOp op, T p0, T p1, const T* x, const StridedLayout& lx, const T* y,
                        const StridedLayout& ly, const T* dy, const StridedLayout& ldy, T* dx,
                        const StridedLayout& ldx) {
  Y9_UNARY_DISPATCH(op, unary_bwd_loop, p0, p1, x, lx, y, ly, dy, ldy, dx, ldx)
}

#define Y9_INST(T)                                                                                              \
  template void binary_forward_cpu<T>(BinaryOp, const T*, const StridedLayout&, const T*, const StridedLayout&, \
                                      T*, const StridedLayout&);                                                \
  template void binary_backward_cpu<T>(BinaryOp, const T*, const StridedLayout&, const T*, const StridedLayout&, \
                                       const T*, const StridedLayout&, T*, const StridedLayout&, T*,            \
                                       const StridedLayout&);                                                   \
  template void unary_forward_cpu<T>(UnaryOp, T, T, const T*, const StridedLayout&, T*, const StridedLayout&);  \
  template void unary_backward_cpu<T>(UnaryOp, T, T, const T*, const StridedLayout&, const T*,                  \
                                      const StridedLayout&, const T*, const StridedLayout&, T*,                 \
                                      const StridedLayout&);
Y9_INST(float)
Y9_INST(double)
#undef Y9_INST

}  // namespace kernels::cpu
