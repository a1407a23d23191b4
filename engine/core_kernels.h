// The kernel entries engine/ itself calls (tensor copies, fills, in-place arithmetic, the sum of
// broadcasting's backward, random fills). Every backend provides them; kernels/<backend> files
// register them. Other entries are declared next to their math in kernels/common/.
#pragma once
#include <cstdint>

#include "engine/backend.h"
#include "engine/strided_layout.h"

namespace engine {

/// dst[i] = convert(src[i]) over the iteration shape `dst_layout.sizes` (`src_layout`: same
/// sizes, stride 0 on broadcast dims). Any dtype pair; conversions go through double (floats
/// round to nearest even, integers truncate, Bool stores v != 0). Looked up by dst dtype.
using CopyStridedFn = void (*)(DeviceContext& ctx, void* dst, DType dst_dtype, const StridedLayout& dst_layout,
                               const void* src, DType src_dtype, const StridedLayout& src_layout);
inline KernelKey<CopyStridedFn> kCopyStrided{"copy_strided"};

/// Sets every element of the strided view to `value` converted to `dtype`.
using FillStridedFn = void (*)(DeviceContext& ctx, void* dst, DType dtype, const StridedLayout& layout,
                               double value);
inline KernelKey<FillStridedFn> kFillStrided{"fill_strided"};

/// dst += alpha * src (same dtype, src broadcast over dst's shape); alpha rounded to the dtype.
using AxpyStridedFn = void (*)(DeviceContext& ctx, void* dst, DType dtype, const StridedLayout& dst_layout,
                               const void* src, const StridedLayout& src_layout, double alpha);
inline KernelKey<AxpyStridedFn> kAxpyStrided{"axpy_strided"};

/// dst *= value (value rounded to the dtype).
using ScaleStridedFn = void (*)(DeviceContext& ctx, void* dst, DType dtype, const StridedLayout& layout,
                                double value);
inline KernelKey<ScaleStridedFn> kScaleStrided{"scale_strided"};

/// out[r] = scale * sum_{i<n} in[r*n + i], in contiguous [rows, n], out contiguous [rows].
/// n == 0 writes zeros. Deterministic (fixed order per row). CPU accumulates in double.
using SumRowsFn = void (*)(DeviceContext& ctx, const void* in, void* out, DType dtype, int64_t rows, int64_t n,
                           double scale);
inline KernelKey<SumRowsFn> kSumRows{"sum_rows"};

/// out[i] = U[lo, hi) draw i of the Philox stream (seed, stream_id) at block `offset`
/// (kernels/common/rng.h philox_uniform_elem), i < n. F32 output.
using UniformFillFn = void (*)(DeviceContext& ctx, float* out, int64_t n, uint64_t seed, uint64_t stream_id,
                               uint64_t offset, float lo, float hi);
inline KernelKey<UniformFillFn> kUniformFill{"uniform_fill"};

/// out[i] = N(mean, std^2) draw i (Box-Muller on lane pairs, philox_normal_elem), i < n. F32.
using NormalFillFn = void (*)(DeviceContext& ctx, float* out, int64_t n, uint64_t seed, uint64_t stream_id,
                              uint64_t offset, float mean, float std);
inline KernelKey<NormalFillFn> kNormalFill{"normal_fill"};

}  // namespace engine
