// CPU strided copy with dtype conversion and broadcasting; fill.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "kernels/common/strided.h"

namespace kernels::cpu {

/// dst[i] = convert(src[i]) over the iteration shape `dst.sizes`; `src` carries broadcast
/// strides (0) over the same shape. Pointers are to element [0,...,0].
void copy_strided_cpu(void* dst, engine::DType dst_dtype, const StridedLayout& dst_layout, const void* src,
                      engine::DType src_dtype, const StridedLayout& src_layout);

/// Sets every element of the strided view to `value` converted to `dtype`.
void fill_strided_cpu(void* dst, engine::DType dtype, const StridedLayout& layout, double value);

/// dst += alpha * src (float dtypes F32/F64 only; src broadcast over dst's shape).
void axpy_strided_cpu(void* dst, engine::DType dtype, const StridedLayout& dst_layout, const void* src,
                      const StridedLayout& src_layout, double alpha);

/// dst *= value (F32/F64).
void scale_strided_cpu(void* dst, engine::DType dtype, const StridedLayout& layout, double value);

}  // namespace kernels::cpu
