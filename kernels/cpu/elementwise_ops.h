// CPU twins of the arithmetic elementwise ops: broadcasting binary ops (add/sub/mul/div) and the
// scalar unary ops (kernels/common/pointwise.h), forward and backward, over strided layouts.
#pragma once
#include <cstdint>

#include "kernels/common/pointwise.h"
#include "kernels/common/strided.h"

namespace kernels::cpu {

enum class BinaryOp : int { Add = 0, Sub = 1, Mul = 2, Div = 3 };

/// out = a (op) b elementwise over the common iteration shape `lo.sizes`. la/lb carry broadcast
/// (stride-0) strides over that shape; out may be any non-overlapping strided layout.
/// T = float or double. Threaded over rows (OpenMP); deterministic.
template <typename T>
void binary_forward_cpu(BinaryOp op, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb,
                        T* out, const StridedLayout& lo);

/// Backward of mul/div over the output shape: da_full = d(a op b)/da * dy and db_full likewise,
/// both written densely in the layouts lda/ldb (usually contiguous over the output shape; the
/// caller reduces broadcast dims with ops::sum_to). Either output pointer may be null.
/// op must be Mul or Div.
template <typename T>
void binary_backward_cpu(BinaryOp op, const T* a, const StridedLayout& la, const T* b, const StridedLayout& lb,
                         const T* dy, const StridedLayout& ldy, T* da, const StridedLayout& lda, T* db,
                         const StridedLayout& ldb);

/// out = unary_fwd(op, x, p0, p1) elementwise; x and out share the iteration shape `lo.sizes`.
template <typename T>
void unary_forward_cpu(UnaryOp op, T p0, T p1, const T* x, const StridedLayout& lx, T* out, const StridedLayout& lo);

/// dx = unary_bwd(op, x, y, dy, p0, p1) elementwise. x or y may be null when the op does not
/// read it (y: Exp, Sqrt; x: Log, PowScalar, Clamp); their layouts are then ignored.
template <typename T>
void unary_backward_cpu(UnaryOp op, T p0, T p1, const T* x, const StridedLayout& lx, const T* y,
                        const StridedLayout& ly, const T* dy, const StridedLayout& ldy, T* dx,
                        const StridedLayout& ldx);

}  // namespace kernels::cpu
