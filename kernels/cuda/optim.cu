// CUDA twins of the fused optimizer, EMA, gradient-norm and clipping entries (kernels/common/optim.h; CPU
// twins kernels/cpu/optim.cpp), issue 11. A step runs over every range of a parameter group in one
// launch: the host-side list of ranges travels to the device as a kernel parameter (a RangeTable
// of up to kTableRanges ranges with their element prefix sums), so no copy, allocation or host
// synchronisation is needed; a group with more ranges is split into consecutive tables, one
// launch each (the update is pointwise, so the split does not change any result). Each thread
// finds its range by a binary search over the prefix sums and applies the same Y9_HD element
// functions as the CPU (sgd_update, adam_update, lion_update, ema_blend).
//
// sum_squares is a deterministic two-pass reduction in double: pass 1 gives each fixed-size
// chunk of every range (kSumChunk elements) one block (strided per-thread partials, then a
// shuffle tree and a shared-memory tree) and writes one double per chunk into a scratch buffer of
// the caching allocator; pass 2 sums each range's chunk partials in chunk order with one block per
// range. No atomics, no dependence on the launch order: bitwise reproducible run to run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/optim.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/scratch.h"

namespace kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kTableRanges = 96;       // ranges per launch (kernel parameters stay under 4 KiB)
constexpr int64_t kSumChunk = 8192;    // elements per pass-1 block of sum_squares
constexpr int kSumBlock = 256;         // threads per sum_squares block (a multiple of kWarp)

/// Up to kTableRanges ranges as a kernel parameter: offset[r] is range r's first element in the
/// flat buffers, start[r] its first index in the concatenation of the table's ranges (start[n] is
/// the total), chunk[r] its first pass-1 chunk (sum_squares only; chunk[n] is the chunk count).
struct RangeTable {
  int n = 0;
  int64_t offset[kTableRanges];
  int64_t start[kTableRanges + 1];
  int64_t chunk[kTableRanges + 1];
};
static_assert(sizeof(RangeTable) < 4000, "RangeTable must fit the 4 KiB kernel parameter space");

/// The table of ranges[first, first + count).
RangeTable make_table(const FlatRange* ranges, int64_t first, int count) {
  RangeTable t;
  t.n = count;
  t.start[0] = 0;
  t.chunk[0] = 0;
  for (int r = 0; r < count; ++r) {
    const FlatRange& rg = ranges[first + r];
    Y9_CHECK_SHAPE(rg.offset >= 0 && rg.n >= 0, "flat range ", first + r, " (offset ", rg.offset, ", n ", rg.n,
                   ") must not be negative");
    t.offset[r] = rg.offset;
    t.start[r + 1] = t.start[r] + rg.n;
    t.chunk[r + 1] = t.chunk[r] + ceil_div(rg.n, kSumChunk);
  }
  return t;
}

/// The last r < t.n with pre[r] <= k (k < pre[t.n]): the range holding index k of the
/// concatenation (empty ranges share their start with the next one and are skipped).
__device__ __forceinline__ int find_range(const int64_t* pre, int n, int64_t k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (pre[mid] <= k) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// Grid-stride loop over every element of the table's ranges: op(i) with i the flat-buffer index.
template <typename Op>
__global__ void ranges_kernel(RangeTable t, Op op) {
  const int64_t total = t.start[t.n];
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += stride) {
    const int r = find_range(t.start, t.n, k);
    op(t.offset[r] + (k - t.start[r]));
  }
}

/// Runs `op` over every element of the ranges, one launch per kTableRanges ranges.
template <typename Op>
void launch_ranges(const FlatRange* ranges, int64_t n_ranges, const Op& op, cudaStream_t stream) {
  for (int64_t first = 0; first < n_ranges; first += kTableRanges) {
    const int count = static_cast<int>(std::min<int64_t>(kTableRanges, n_ranges - first));
    const RangeTable t = make_table(ranges, first, count);
    const int64_t total = t.start[count];
    if (total == 0) continue;
    Y9_LAUNCH(ranges_kernel<Op>, grid_for(total), kBlock, 0, stream, t, op);
  }
}

// --- element functors over the shared math ----------------------------------------------------

struct SgdOp {
  float* p;
  const float* g;
  float* buf;  // null when s.momentum == 0
  SgdScalars s;
  __device__ void operator()(int64_t i) const {
    float unused = 0.f;
    sgd_update(p[i], g[i], buf ? buf[i] : unused, s);
  }
};

struct AdamOp {
  float* p;
  const float* g;
  float* m;
  float* v;
  float* vmax;  // null unless s.amsgrad
  AdamScalars s;
  __device__ void operator()(int64_t i) const {
    float unused = 0.f;
    adam_update(p[i], g[i], m[i], v[i], vmax ? vmax[i] : unused, s);
  }
};

struct LionOp {
  float* p;
  const float* g;
  float* m;
  LionScalars s;
  __device__ void operator()(int64_t i) const { lion_update(p[i], g[i], m[i], s); }
};

__global__ void ema_kernel(float* __restrict__ ema, const float* __restrict__ model, int64_t n, float d,
                           float one_minus_d) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride)
    ema[i] = ema_blend(ema[i], model[i], d, one_minus_d);
}

// --- sum_squares ------------------------------------------------------------------------------

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

/// Sum of `v` over the block (blockDim.x a multiple of kWarp, at most kSumBlock), valid in thread
/// 0; `sh` holds kSumBlock / kWarp doubles of shared memory. Every thread must call it.
__device__ __forceinline__ double block_sum(double v, double* sh) {
  v = warp_sum(v);
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
  if (lane == 0) sh[w] = v;
  __syncthreads();
  double r = 0.0;
  if (w == 0) {
    r = lane < int(blockDim.x / kWarp) ? sh[lane] : 0.0;
    r = warp_sum(r);
  }
  __syncthreads();  // sh is reused by the caller's next call
  return r;
}

/// Pass 1: partial[c] = sum of g[i]^2 over chunk c (kSumChunk elements of one range).
__global__ void sum_squares_chunks_kernel(RangeTable t, const float* __restrict__ g, double* __restrict__ partial) {
  __shared__ double sh[kSumBlock / kWarp];
  const int64_t chunks = t.chunk[t.n];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int r = find_range(t.chunk, t.n, c);
    const int64_t lo = (c - t.chunk[r]) * kSumChunk;
    const int64_t n = t.start[r + 1] - t.start[r];
    const int64_t hi = lo + kSumChunk < n ? lo + kSumChunk : n;
    const float* p = g + t.offset[r];
    double acc = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      const double v = static_cast<double>(p[i]);
      acc += v * v;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[c] = acc;
  }
}

/// Pass 2: out[r] = sum of range r's chunk partials (0 for an empty range).
__global__ void sum_squares_ranges_kernel(RangeTable t, const double* __restrict__ partial, double* __restrict__ out) {
  __shared__ double sh[kSumBlock / kWarp];
  for (int r = blockIdx.x; r < t.n; r += gridDim.x) {
    double acc = 0.0;
    for (int64_t c = t.chunk[r] + threadIdx.x; c < t.chunk[r + 1]; c += blockDim.x) acc += partial[c];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) out[r] = acc;
  }
}

// --- clipping ---------------------------------------------------------------------------------

/// One thread: norm[0] from the per-range sums (global_norm_from_sums).
__global__ void grad_norm_from_sums_kernel(const double* __restrict__ sums, int64_t n, float* __restrict__ norm) {
  if (threadIdx.x == 0 && blockIdx.x == 0) norm[0] = global_norm_from_sums(sums, n);
}

/// g[i] *= coef when !(coef >= 1); every thread derives coef from norm[0] (no host round trip).
__global__ void clip_by_norm_kernel(float* __restrict__ g, int64_t n, const float* __restrict__ norm,
                                    float max_norm) {
  const float coef = clip_coef(norm[0], max_norm);
  if (coef >= 1.0f) return;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride) g[i] = g[i] * coef;
}

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

// --- entries ----------------------------------------------------------------------------------

/// sgd_step on CUDA: sgd_update over the ranges of the flat F32 buffers p, g, buf (device
/// memory; buf may be null only when s.momentum == 0). `ranges` is host memory.
void sgd_step(engine::DeviceContext& ctx, float* p, const float* g, float* buf, const FlatRange* ranges,
              int64_t n_ranges, const SgdScalars& s) {
  Y9_CHECK_SHAPE(s.momentum == 0.f || buf, "sgd_step: momentum ", s.momentum, " needs a momentum buffer");
  launch_ranges(ranges, n_ranges, SgdOp{p, g, s.momentum == 0.f ? nullptr : buf, s}, stream_of(ctx));
}

/// adam_step on CUDA: adam_update over the ranges of the flat F32 buffers p, g, m, v and (amsgrad)
/// vmax in device memory; vmax may be null unless s.amsgrad. `ranges` is host memory.
void adam_step(engine::DeviceContext& ctx, float* p, const float* g, float* m, float* v, float* vmax,
               const FlatRange* ranges, int64_t n_ranges, const AdamScalars& s) {
  Y9_CHECK_SHAPE(!s.amsgrad || vmax, "adam_step: amsgrad needs the max_exp_avg_sq buffer");
  launch_ranges(ranges, n_ranges, AdamOp{p, g, m, v, s.amsgrad ? vmax : nullptr, s}, stream_of(ctx));
}

/// lion_step on CUDA: lion_update over the ranges of the flat F32 buffers p, g, m (device
/// memory). `ranges` is host memory.
void lion_step(engine::DeviceContext& ctx, float* p, const float* g, float* m, const FlatRange* ranges,
               int64_t n_ranges, const LionScalars& s) {
  launch_ranges(ranges, n_ranges, LionOp{p, g, m, s}, stream_of(ctx));
}

/// ema_update on CUDA: ema[i] = ema_blend(ema[i], model[i], d, one_minus_d) for the n F32
/// elements of two device buffers.
void ema_update(engine::DeviceContext& ctx, float* ema, const float* model, int64_t n, float d, float one_minus_d) {
  if (n <= 0) return;
  Y9_LAUNCH(ema_kernel, grid_for(n), kBlock, 0, stream_of(ctx), ema, model, n, d, one_minus_d);
}

/// sum_squares on CUDA: out[r] (F64, device memory) = sum over range r of g[i]^2 (F32 device
/// buffer) in double, by the two-pass chunked reduction above: deterministic, no host reads.
/// `ranges` is host memory.
void sum_squares(engine::DeviceContext& ctx, const float* g, const FlatRange* ranges, int64_t n_ranges, double* out) {
  cudaStream_t stream = stream_of(ctx);
  for (int64_t first = 0; first < n_ranges; first += kTableRanges) {
    const int count = static_cast<int>(std::min<int64_t>(kTableRanges, n_ranges - first));
    const RangeTable t = make_table(ranges, first, count);
    const int64_t chunks = t.chunk[count];
    Scratch partial(ctx.device(), static_cast<size_t>(chunks) * sizeof(double));
    if (chunks > 0)
      Y9_LAUNCH(sum_squares_chunks_kernel, grid_for(chunks, 1), kSumBlock, 0, stream, t, g, partial.as<double>());
    Y9_LAUNCH(sum_squares_ranges_kernel, static_cast<unsigned>(count), kSumBlock, 0, stream, t,
              static_cast<const double*>(partial.as<double>()), out + first);
  }
}

/// grad_norm_from_sums on CUDA: one thread reads the F64 sums and writes the F32 norm, both in
/// device memory, bitwise equal to the CPU twin.
void grad_norm_from_sums(engine::DeviceContext& ctx, const double* sums, int64_t n_ranges, float* norm) {
  Y9_LAUNCH(grad_norm_from_sums_kernel, 1, 1, 0, stream_of(ctx), sums, n_ranges, norm);
}

/// clip_by_norm on CUDA: scales the n F32 elements of g (device memory) by the coefficient derived
/// on the device from norm[0]; a no-op kernel when the coefficient is >= 1.
void clip_by_norm(engine::DeviceContext& ctx, float* g, int64_t n, const float* norm, float max_norm) {
  if (n <= 0) return;
  Y9_LAUNCH(clip_by_norm_kernel, grid_for(n), kBlock, 0, stream_of(ctx), g, n, norm, max_norm);
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  const engine::DTypeSet f32{engine::DType::F32};
  b.add(kSgdStep, &sgd_step, f32);
  b.add(kAdamStep, &adam_step, f32);
  b.add(kLionStep, &lion_step, f32);
  b.add(kEmaUpdate, &ema_update, f32);
  b.add(kSumSquares, &sum_squares, f32);
  b.add(kGradNormFromSums, &grad_norm_from_sums, f32);
  b.add(kClipByNorm, &clip_by_norm, f32);
}

}  // namespace kernels::cuda
