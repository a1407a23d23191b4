// Kernel entries of the collective algorithms (apps/training/dist/allreduce.h): the local
// reduction of a received slice into the buffer and the scaling of an averaged result. Payloads
// F32, F64, F16 and BF16; F16/BF16 are accumulated in FP32 (load, add in float, round once to
// nearest even with engine/half.h), F64 in double. Both entries work in place over dense ranges
// and run on the device's StreamKind::Communication stream (the stream the communicator uses),
// so on CUDA they are ordered after the receive that produced `src`. n == 0 is a no-op.
#pragma once
#include <cstdint>

#include "engine/backend.h"

namespace kernels {

/// dst[i] = dst[i] + src[i] for i < n (dst and src dense, of `dtype`, on the context's device;
/// they must not overlap).
using CommAccumulateFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, void* dst, const void* src,
                                  int64_t n);
inline engine::KernelKey<CommAccumulateFn> kCommAccumulate{"comm_accumulate"};

/// data[i] = data[i] * scale for i < n, computed in FP32 (F64 for F64 data).
using CommScaleFn = void (*)(engine::DeviceContext& ctx, engine::DType dtype, void* data, int64_t n, double scale);
inline engine::KernelKey<CommScaleFn> kCommScale{"comm_scale"};

/// Gradient compression for the wire (`--grad-dtype fp16|bf16`): dst[i] = wire(src[i] * scale),
/// src F32, dst of the `wire` dtype (F16, BF16; F32 copies), rounded to nearest even.
using CommCompressFn = void (*)(engine::DeviceContext& ctx, engine::DType wire, const float* src, void* dst, int64_t n,
                                double scale);
inline engine::KernelKey<CommCompressFn> kCommCompress{"comm_compress"};

/// dst[i] = float(src[i]) * scale: the inverse of comm_compress (src of the `wire` dtype, dst F32).
using CommDecompressFn = void (*)(engine::DeviceContext& ctx, engine::DType wire, const void* src, float* dst,
                                  int64_t n, double scale);
inline engine::KernelKey<CommDecompressFn> kCommDecompress{"comm_decompress"};

}  // namespace kernels
