// CPU twins of the pointwise ops (kernels/common/elementwise.h): broadcasting binary ops, every
// UnaryOp, BCE with logits, forward and backward, over strided layouts through the one CPU
// iterator (nd_iter.h). The op is turned into a template parameter outside the loops so the inner
// loop is a switch-free body; contiguous and broadcast-scalar inner strides get their own loops.
#include "kernels/common/elementwise.h"

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/nd_iter.h"

namespace kernels::cpu {

using engine::DeviceContext;
using engine::DType;

namespace {

template <typename T, typename F>
void binary_loop(F f, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb, T* out,
                 const StridedLayout& lo) {
  int64_t st[3][kMaxDims];
  const StridedLayout* ls[3] = {&lo, &la, &lb};
  layout_strides<3>(st, ls);
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

/// Two-output backward loop: o1 = f1(a, b, g), o2 = f2(a, b, g); either output may be null.
template <typename T, typename FA, typename FB>
void backward2_loop(FA fa, FB fb, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb,
                    const T* dy, const StridedLayout& ldy, T* da, const StridedLayout& lda, T* db,
                    const StridedLayout& ldb) {
  int64_t st[5][kMaxDims];
  const StridedLayout* ls[5] = {&ldy, &la, &lb, da ? &lda : &ldy, db ? &ldb : &ldy};
  layout_strides<5>(st, ls);
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
  layout_strides<2>(st, ls);
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
  layout_strides<4>(st, ls);
  nd_for_each_row<4>(ldx.ndim, ldx.sizes, st, [&](const int64_t* off, int64_t n, const int64_t* in) {
    T* o = dx + off[0];
    const T* px = xs + off[1];
    const T* py = ys + off[2];
    const T* g = dy + off[3];
    if (in[0] == 1 && in[1] == 1 && in[2] == 1 && in[3] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = unary_bwd<T>(OP, px[i], py[i], g[i], p0, p1);
    } else {
      for (int64_t i = 0; i < n; ++i)
        o[i * in[0]] = unary_bwd<T>(OP, px[i * in[1]], py[i * in[2]], g[i * in[3]], p0, p1);
    }
  });
}

// --- entries ----------------------------------------------------------------------------------------

void binary_forward(DeviceContext&, BinaryOp op, DType dt, void* out, const StridedLayout& lo, const void* a,
                    const StridedLayout& la, const void* b, const StridedLayout& lb) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    auto pa = static_cast<const T*>(a);
    auto pb = static_cast<const T*>(b);
    auto po = static_cast<T*>(out);
    switch (op) {
      case BinaryOp::Add: return binary_loop(AddOp{}, pa, la, pb, lb, po, lo);
      case BinaryOp::Sub: return binary_loop(SubOp{}, pa, la, pb, lb, po, lo);
      case BinaryOp::Mul: return binary_loop(MulOp{}, pa, la, pb, lb, po, lo);
      case BinaryOp::Div: return binary_loop(DivOp{}, pa, la, pb, lb, po, lo);
    }
  });
}

void binary_backward(DeviceContext&, BinaryOp op, DType dt, const void* a, const StridedLayout& la, const void* b,
                     const StridedLayout& lb, const void* dy, const StridedLayout& ldy, void* da,
                     const StridedLayout& lda, void* db, const StridedLayout& ldb) {
  Y9_ASSERT(op == BinaryOp::Mul || op == BinaryOp::Div, "binary_backward: only mul and div need a kernel, got ",
            binary_op_name(op));
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    auto pa = static_cast<const T*>(a);
    auto pb = static_cast<const T*>(b);
    auto pg = static_cast<const T*>(dy);
    if (op == BinaryOp::Mul)
      backward2_loop([](T x, T y, T g) { return mul_bwd_a(x, y, g); }, [](T x, T y, T g) { return mul_bwd_b(x, y, g); },
                     pa, la, pb, lb, pg, ldy, static_cast<T*>(da), lda, static_cast<T*>(db), ldb);
    else
      backward2_loop([](T x, T y, T g) { return div_bwd_a(x, y, g); }, [](T x, T y, T g) { return div_bwd_b(x, y, g); },
                     pa, la, pb, lb, pg, ldy, static_cast<T*>(da), lda, static_cast<T*>(db), ldb);
  });
}

void unary_forward(DeviceContext&, UnaryOp op, DType dt, double p0, double p1, void* out, const StridedLayout& lo,
                   const void* x, const StridedLayout& lx) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    visit_unary(op, [&](auto o) {
      unary_fwd_loop<decltype(o)::value, T>(static_cast<T>(p0), static_cast<T>(p1), static_cast<const T*>(x), lx,
                                            static_cast<T*>(out), lo);
    });
  });
}

void unary_backward(DeviceContext&, UnaryOp op, DType dt, double p0, double p1, void* dx, const StridedLayout& ldx,
                    const void* x, const StridedLayout& lx, const void* y, const StridedLayout& ly, const void* dy,
                    const StridedLayout& ldy) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    visit_unary(op, [&](auto o) {
      unary_bwd_loop<decltype(o)::value, T>(static_cast<T>(p0), static_cast<T>(p1), static_cast<const T*>(x), lx,
                                            static_cast<const T*>(y), ly, static_cast<const T*>(dy), ldy,
                                            static_cast<T*>(dx), ldx);
    });
  });
}

void bce_forward(DeviceContext&, DType dt, void* loss, const StridedLayout& ll, const void* x,
                 const StridedLayout& lx, const void* t, const StridedLayout& lt) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    binary_loop([](T a, T b) { return bce_with_logits_fwd(a, b); }, static_cast<const T*>(x), lx,
                static_cast<const T*>(t), lt, static_cast<T*>(loss), ll);
  });
}

void bce_backward(DeviceContext&, DType dt, const void* x, const StridedLayout& lx, const void* t,
                  const StridedLayout& lt, const void* dy, const StridedLayout& ldy, void* dx,
                  const StridedLayout& ldx, void* dt_out, const StridedLayout& ldt) {
  float_or_double(dt, [&](auto tag) {
    using T = decltype(tag);
    backward2_loop([](T a, T b, T g) { return bce_with_logits_bwd_x(a, b, g); },
                   [](T a, T b, T g) { return bce_with_logits_bwd_t(a, b, g); }, static_cast<const T*>(x), lx,
                   static_cast<const T*>(t), lt, static_cast<const T*>(dy), ldy, static_cast<T*>(dx), ldx,
                   static_cast<T*>(dt_out), ldt);
  });
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.add(kBinaryForward, &binary_forward, engine::kF32F64);
  b.add(kBinaryBackward, &binary_backward, engine::kF32F64);
  b.add(kUnaryForward, &unary_forward, engine::kF32F64);
  b.add(kUnaryBackward, &unary_backward, engine::kF32F64);
  b.add(kBceWithLogitsForward, &bce_forward, engine::kF32F64);
  b.add(kBceWithLogitsBackward, &bce_backward, engine::kF32F64);
}

}  // namespace kernels::cpu
