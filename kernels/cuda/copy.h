// CUDA strided copy with dtype conversion and broadcasting, fill, axpy and scale: the twins of
// kernels/cpu/copy.h with a trailing stream. Launchers are asynchronous on `stream`; every
// pointer is device memory of the stream's device. Include only with Y9_WITH_CUDA (no nvcc needed).
#pragma once
#include <cstdint>

#include "engine/cuda_runtime.h"
#include "engine/dtype.h"
#include "kernels/common/strided.h"
#include "kernels/cuda/stream.h"

namespace kernels::cuda {

/// dst[i] = convert(src[i]) over the iteration shape `dst_layout.sizes` (any dtype pair;
/// conversions go through double exactly as copy_strided_cpu does, F16/BF16 rounding through
/// engine/half.h). `src_layout` has the same sizes, broadcast dims stride 0. Pointers are to
/// element [0,...,0]. Bitwise deterministic. Throws CudaError on a launch failure.
void copy_strided_cuda(void* dst, engine::DType dst_dtype, const StridedLayout& dst_layout, const void* src,
                       engine::DType src_dtype, const StridedLayout& src_layout, cudaStream_t stream);

/// Sets every element of the strided view to `value` converted to `dtype` (any dtype).
void fill_strided_cuda(void* dst, engine::DType dtype, const StridedLayout& layout, double value,
                       cudaStream_t stream);

/// dst += alpha * src (src broadcast over dst's shape, same dtype). F32/F64 like the CPU twin,
/// plus F16/BF16 computed in float. Throws ShapeError for other dtypes.
void axpy_strided_cuda(void* dst, engine::DType dtype, const StridedLayout& dst_layout, const void* src,
                       const StridedLayout& src_layout, double alpha, cudaStream_t stream);

/// dst *= value. F32/F64, plus F16/BF16 computed in float. Throws ShapeError for other dtypes.
void scale_strided_cuda(void* dst, engine::DType dtype, const StridedLayout& layout, double value,
                        cudaStream_t stream);

}  // namespace kernels::cuda
