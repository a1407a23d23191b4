// CUDA nms_batched entry (kernels/common/nms.h): the official non_max_suppression for every image
// of a batch in one launch sequence, bitwise equal to the CPU twin (kernels/cpu/nms.cpp).
//
// Per image (all images of a batch in each launch):
//   1. count: one block per image scans its anchors: the twin's candidate rule (NaN-propagating
//      max class score > conf), then the detections of the anchor (multi_label: every class with
//      score > conf in the class filter; else the first best class, if in the filter), and an
//      exclusive prefix sum of those counts (the anchor's first slot). The B totals are read back
//      (the one host synchronisation) to size the sort.
//   2. keys: every detection writes the 64-bit key (~score bits) << 32 | (anchor * nc + class).
//      Scores are > conf >= 0 (positive, not NaN), so the key order is descending score, then
//      ascending (anchor, class): the twin's total order (a stable sort of the official
//      generation order). Keys are unique, so any correct sort gives the same sequence.
//   3. sort: bitonic sort of each image's keys (padded with ~0 to a power of two) over the whole
//      batch: the steps inside 2048-key tiles in shared memory (one launch per k), the steps
//      across tiles one global launch each; the first min(n, max_nms) keys go on.
//   4. gather: boxes xywh -> xyxy, shifted by class * max_wh (unless agnostic), areas.
//   5. mask: torchvision's CUDA nms bit matrix: for rows i and 64-column blocks, bit j set when
//      IoU(i, j) > iou_thres, j > i (upper triangle only); in chunks of images under a memory budget.
//   6. greedy: one block per image walks the rows in score order (skipping removed words), keeps
//      row i unless a kept row removed it, ORs the kept row's mask into the removed set, stops at
//      capacity (max_det) kept rows, then writes the kept rows [x1, y1, x2, y2, conf, cls, masks] and the count.
// FP32 arithmetic that the twin rounds op by op (xywh2xyxy, the class offset, the overlap's
// areas and union) uses the _rn intrinsics under nvcc, so no multiply-add is contracted into an
// FMA (the twin's host build has none); the IoU test is (double)iou > iou_thres, as the twin's.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "kernels/common/nms.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/scratch.h"

namespace kernels::cuda {

namespace {

constexpr int kScanThreads = 512;    // count + prefix sum: one block per image
constexpr int kGreedyThreads = 128;  // greedy pass: one block per image
constexpr int kMaskBlock = 64;       // rows and columns of one mask block (one uint64 per row)
constexpr int64_t kSortTile = 2048;  // keys per block of the shared-memory bitonic steps
constexpr int64_t kMaskBudget = int64_t(1) << 30;  // bytes of mask matrix per launch (image chunks)

/// The mask budget: kMaskBudget, or the environment's Y9_NMS_MASK_BUDGET bytes (read per call; a
/// test hook that makes small batches run in several chunks).
int64_t mask_budget() {
  const char* e = std::getenv("Y9_NMS_MASK_BUDGET");
  const long long v = e ? std::atoll(e) : 0;
  return v > 0 ? static_cast<int64_t>(v) : kMaskBudget;
}

// --- FP32 without contraction (the twin rounds every operation) -----------------------------------

#if defined(Y9_CUDA_EMULATOR)
__device__ __forceinline__ float f_add(float a, float b) { return a + b; }
__device__ __forceinline__ float f_sub(float a, float b) { return a - b; }
__device__ __forceinline__ float f_mul(float a, float b) { return a * b; }
__device__ __forceinline__ float f_div(float a, float b) { return a / b; }
__device__ __forceinline__ int ctz64(uint64_t x) { return __builtin_ctzll(x); }  // x != 0
__device__ __forceinline__ uint32_t float_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}
__device__ __forceinline__ float bits_float(uint32_t u) {
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}
#else
__device__ __forceinline__ float f_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float f_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float f_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float f_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ int ctz64(uint64_t x) { return __ffsll(static_cast<long long>(x)) - 1; }  // x != 0
__device__ __forceinline__ uint32_t float_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ float bits_float(uint32_t u) { return __uint_as_float(u); }
#endif

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/// The twin's candidate rule and best class for anchor a of one image (p = the image's base):
/// best = NaN-propagating max of the class scores (amax), candidate iff best > conf; bc/bs the
/// first maximum (torch.max(dim)). Returns whether the anchor is a candidate.
__device__ __forceinline__ bool anchor_best(const float* p, const NmsGeom& g, int64_t a, float conf, int64_t& bc,
                                            float& bs) {
  float best = -INFINITY;
  bc = 0;
  bs = p[4 * g.s[1] + a * g.s[2]];
  for (int64_t c = 0; c < g.nc; ++c) {
    const float v = p[(4 + c) * g.s[1] + a * g.s[2]];
    if (v > best || v != v) best = v;
    if (c > 0 && v > bs) {
      bs = v;
      bc = c;
    }
  }
  return best > conf;
}

/// Detections of anchor a: multi-label classes above conf in the filter, or its best class.
__device__ __forceinline__ int64_t anchor_count(const float* p, const NmsGeom& g, int64_t a, float conf, bool multi,
                                                const uint8_t* ok) {
  int64_t bc;
  float bs;
  if (!anchor_best(p, g, a, conf, bc, bs)) return 0;
  if (!multi) return (!ok || ok[bc]) ? 1 : 0;
  int64_t n = 0;
  for (int64_t c = 0; c < g.nc; ++c)
    if (p[(4 + c) * g.s[1] + a * g.s[2]] > conf && (!ok || ok[c])) ++n;
  return n;
}

__device__ __forceinline__ uint64_t make_key(float score, int64_t idx) {
  return (uint64_t(~float_bits(score)) << 32) | uint64_t(uint32_t(idx));
}

/// The twin's nms_overlap (kernels/common/box.h) with every FP32 operation rounded.
__device__ __forceinline__ float overlap_rn(const float* bi, float ai, const float* bj, float aj) {
  const float xx1 = bi[0] > bj[0] ? bi[0] : bj[0];
  const float yy1 = bi[1] > bj[1] ? bi[1] : bj[1];
  const float xx2 = bi[2] < bj[2] ? bi[2] : bj[2];
  const float yy2 = bi[3] < bj[3] ? bi[3] : bj[3];
  const float dw = f_sub(xx2, xx1), dh = f_sub(yy2, yy1);
  const float w = dw > 0.f ? dw : 0.f;
  const float h = dh > 0.f ? dh : 0.f;
  const float inter = f_mul(w, h);
  return f_div(inter, f_sub(f_add(ai, aj), inter));
}

// --- kernels ---------------------------------------------------------------------------------------

// 1. One block per image: offsets[b, a] = first slot of anchor a's detections, totals[b].
__global__ void nms_count_kernel(const float* __restrict__ pred, NmsGeom g, float conf, bool multi,
                                 const uint8_t* __restrict__ ok, int64_t* __restrict__ offsets,
                                 int64_t* __restrict__ totals) {
  __shared__ int64_t sh[kScanThreads];
  const int64_t b = blockIdx.x;
  const int t = threadIdx.x;
  const float* p = pred + b * g.s[0];
  int64_t base = 0;  // every thread keeps the running total of the chunks before
  for (int64_t start = 0; start < g.anchors; start += kScanThreads) {
    const int64_t a = start + t;
    const int64_t n = a < g.anchors ? anchor_count(p, g, a, conf, multi, ok) : 0;
    sh[t] = n;
    __syncthreads();
    for (int d = 1; d < kScanThreads; d <<= 1) {  // Hillis-Steele inclusive scan
      const int64_t v = t >= d ? sh[t - d] : 0;
      __syncthreads();
      sh[t] += v;
      __syncthreads();
    }
    if (a < g.anchors) offsets[b * g.anchors + a] = base + sh[t] - n;
    base += sh[kScanThreads - 1];
    __syncthreads();  // everyone has read sh before the next chunk writes it
  }
  if (t == 0) totals[b] = base;
}

// 2. keys[b, 0:P] = ~0 (padding), then every detection's key at its slot.
__global__ void nms_fill_kernel(uint64_t* __restrict__ keys, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    keys[i] = ~uint64_t(0);
}

__global__ void nms_keys_kernel(const float* __restrict__ pred, NmsGeom g, float conf, bool multi,
                                const uint8_t* __restrict__ ok, const int64_t* __restrict__ offsets, int64_t P,
                                uint64_t* __restrict__ keys) {
  const int64_t total = g.batch * g.anchors;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / g.anchors, a = i % g.anchors;
    const float* p = pred + b * g.s[0];
    int64_t bc;
    float bs;
    if (!anchor_best(p, g, a, conf, bc, bs)) continue;
    uint64_t* k = keys + b * P + offsets[i];
    if (!multi) {
      if (!ok || ok[bc]) *k = make_key(bs, a * g.nc + bc);
      continue;
    }
    for (int64_t c = 0; c < g.nc; ++c) {
      const float v = p[(4 + c) * g.s[1] + a * g.s[2]];
      if (v > conf && (!ok || ok[c])) *k++ = make_key(v, a * g.nc + c);
    }
  }
}

// 3. One bitonic compare-exchange step (k: sequence size, j: distance) on every image's P keys.
__global__ void nms_bitonic_kernel(uint64_t* __restrict__ keys, int64_t batch, int64_t P, int64_t k, int64_t j) {
  const int64_t half = P / 2, total = batch * half;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = t / half, r = t % half;
    const int64_t i = (r / j) * 2 * j + r % j, l = i + j;  // i has bit j clear
    uint64_t* s = keys + b * P;
    const uint64_t x = s[i], y = s[l];
    const bool ascending = (i & k) == 0;
    if ((x > y) == ascending) {
      s[i] = y;
      s[l] = x;
    }
  }
}

// 3'. The bitonic steps whose pairs lie inside one tile of `tile` keys, in shared memory: one block
//    per tile (grid B * P / tile), steps (k, j) for k = k_first..k_last (doubling) and j from
//    j_first (for k_first; k / 2 for later k) down to 1. The direction bit is the key's index in
//    its image's sequence, as in the global step.
__global__ void nms_bitonic_tile_kernel(uint64_t* __restrict__ keys, int64_t P, int64_t tile, int64_t k_first,
                                        int64_t k_last, int64_t j_first) {
  Y9_DYNAMIC_SHARED(uint64_t, s);
  const int64_t tiles = P / tile, b = blockIdx.x / tiles, t0 = (blockIdx.x % tiles) * tile;
  uint64_t* g = keys + b * P + t0;
  const int t = threadIdx.x, nt = blockDim.x;
  for (int64_t i = t; i < tile; i += nt) s[i] = g[i];
  __syncthreads();
  for (int64_t k = k_first; k <= k_last; k *= 2)
    for (int64_t j = k == k_first ? j_first : k / 2; j > 0; j /= 2) {
      for (int64_t r = t; r < tile / 2; r += nt) {
        const int64_t i = (r / j) * 2 * j + r % j, l = i + j;
        const uint64_t x = s[i], y = s[l];
        if ((x > y) == (((t0 + i) & k) == 0)) {
          s[i] = y;
          s[l] = x;
        }
      }
      __syncthreads();
    }
  for (int64_t i = t; i < tile; i += nt) g[i] = s[i];
}

// 4. Rows i < n_b = min(totals[b], max_nms): xyxy (unshifted), shifted boxes and their areas.
__global__ void nms_gather_kernel(const float* __restrict__ pred, NmsGeom g, const uint64_t* __restrict__ keys,
                                  int64_t P, const int64_t* __restrict__ totals, int64_t M, float offset_scale,
                                  float* __restrict__ xyxy, float* __restrict__ shifted, float* __restrict__ area) {
  const int64_t total = g.batch * M;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = t / M, i = t % M;
    if (i >= imin(totals[b], M)) continue;
    const int64_t idx = int64_t(uint32_t(keys[b * P + i]));
    const int64_t a = idx / g.nc, c = idx % g.nc;
    const float* p = pred + b * g.s[0] + a * g.s[2];
    const float cx = p[0], cy = p[g.s[1]], w = p[2 * g.s[1]], h = p[3 * g.s[1]];
    float* o = xyxy + 4 * t;
    o[0] = f_sub(cx, f_div(w, 2.f));
    o[1] = f_sub(cy, f_div(h, 2.f));
    o[2] = f_add(cx, f_div(w, 2.f));
    o[3] = f_add(cy, f_div(h, 2.f));
    const float off = f_mul(float(c), offset_scale);
    float* s = shifted + 4 * t;
    for (int q = 0; q < 4; ++q) s[q] = f_add(o[q], off);
    area[t] = f_mul(f_sub(s[2], s[0]), f_sub(s[3], s[1]));
  }
}

// 5. Images b0 + blockIdx.z: mask[(z * M + i) * colb + cb] bit j = IoU(row i, row cb * 64 + j) > iou,
//    for j > i (blocks cb >= the row's block only; the others are never read).
__global__ void nms_mask_kernel(const float* __restrict__ shifted, const float* __restrict__ area,
                                const int64_t* __restrict__ totals, int64_t M, int64_t colb, int64_t b0, double iou,
                                uint64_t* __restrict__ mask) {
  const int64_t rb = blockIdx.y, cb = blockIdx.x, z = blockIdx.z, b = b0 + z;
  if (cb < rb) return;
  const int64_t n = imin(totals[b], M);
  const int64_t rows = imin(n - rb * kMaskBlock, kMaskBlock), cols = imin(n - cb * kMaskBlock, kMaskBlock);
  if (rows <= 0 || cols <= 0) return;  // uniform over the block
  __shared__ float cbox[kMaskBlock * 5];
  const int t = threadIdx.x;
  if (t < cols) {
    const int64_t j = b * M + cb * kMaskBlock + t;
    for (int q = 0; q < 4; ++q) cbox[5 * t + q] = shifted[4 * j + q];
    cbox[5 * t + 4] = area[j];
  }
  __syncthreads();
  if (t < rows) {
    const int64_t i = b * M + rb * kMaskBlock + t;
    float bi[4];
    for (int q = 0; q < 4; ++q) bi[q] = shifted[4 * i + q];
    const float ai = area[i];
    uint64_t bits = 0;
    for (int64_t j = rb == cb ? t + 1 : 0; j < cols; ++j)
      if (double(overlap_rn(bi, ai, cbox + 5 * j, cbox[5 * j + 4])) > iou) bits |= uint64_t(1) << j;
    mask[(z * M + rb * kMaskBlock + t) * colb + cb] = bits;
  }
}

// 6. One block per image b0 + blockIdx.x: the greedy pass over the mask, then the output rows.
__global__ void nms_greedy_kernel(const float* __restrict__ pred, NmsGeom g, const uint64_t* __restrict__ keys,
                                  int64_t P, const int64_t* __restrict__ totals, int64_t M, int64_t colb, int64_t b0,
                                  const uint64_t* __restrict__ mask, const float* __restrict__ xyxy,
                                  uint64_t* __restrict__ removed, int32_t* __restrict__ keep, int64_t capacity,
                                  float* __restrict__ out, int64_t* __restrict__ counts) {
  const int64_t z = blockIdx.x, b = b0 + z;
  const int t = threadIdx.x, nt = blockDim.x;
  const int64_t n = imin(totals[b], M), words = ceil_div(n, kMaskBlock);
  uint64_t* rem = removed + z * colb;
  int32_t* kp = keep + b * capacity;
  for (int64_t w = t; w < words; w += nt) rem[w] = 0;
  __syncthreads();
  int64_t nk = 0;  // the same in every thread: every decision reads the same removed bits
  for (int64_t i = 0; i < n && nk < capacity; ++i) {
    // The next row at or after i that no kept row removed (whole removed words skipped).
    const uint64_t live = ~rem[i / kMaskBlock] & (~uint64_t(0) << (i % kMaskBlock));
    if (!live) {
      i = (i / kMaskBlock + 1) * kMaskBlock - 1;
      continue;
    }
    i = (i / kMaskBlock) * kMaskBlock + ctz64(live);
    if (i >= n) break;
    if (t == 0) kp[nk] = static_cast<int32_t>(i);
    ++nk;
    __syncthreads();  // every thread has read bit i before the row is merged
    const uint64_t* row = mask + (z * M + i) * colb;
    for (int64_t w = i / kMaskBlock + t; w < words; w += nt) rem[w] |= row[w];
    __syncthreads();
  }
  __syncthreads();  // kp complete
  const int64_t width = 6 + g.nm;
  for (int64_t k = t; k < nk; k += nt) {
    const int64_t i = kp[k];
    const uint64_t key = keys[b * P + i];
    const int64_t idx = int64_t(uint32_t(key)), a = idx / g.nc, c = idx % g.nc;
    float* o = out + (b * capacity + k) * width;
    const float* box = xyxy + 4 * (b * M + i);
    for (int q = 0; q < 4; ++q) o[q] = box[q];
    o[4] = bits_float(~uint32_t(key >> 32));
    o[5] = float(c);
    const float* p = pred + b * g.s[0] + a * g.s[2];
    for (int64_t m = 0; m < g.nm; ++m) o[6 + m] = p[(4 + g.nc + m) * g.s[1]];
  }
  if (t == 0) counts[b] = nk;
}

cudaStream_t stream_of(engine::DeviceContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

// --- entry (signature and semantics: kernels/common/nms.h) ------------------------------------------

/// nms_batched on CUDA: the launch sequence above; one host synchronisation (the B candidate
/// totals), scratch from the caching allocator.
void nms_batched_cuda(engine::DeviceContext& ctx, const float* pred, const NmsGeom& g, const NmsConfig& cfg,
                      int64_t capacity, float* out, int64_t* counts) {
  const engine::Device dev = ctx.device();
  cudaStream_t st = stream_of(ctx);
  const int64_t B = g.batch, A = g.anchors;
  if (B == 0) return;
  Y9_CHECK_SHAPE(A * g.nc <= kNmsMaxPairs, "nms_batched: anchors * classes = ", A * g.nc, " exceeds ", kNmsMaxPairs,
                 " on cuda");
  auto zero_counts = [&] { CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(int64_t) * B, st)); };
  if (capacity <= 0 || A == 0) return zero_counts();
  const bool multi = cfg.multi_label && g.nc > 1;

  Scratch ok(dev, cfg.classes ? static_cast<size_t>(g.nc) : 0);
  if (cfg.classes) {
    std::vector<uint8_t> host(static_cast<size_t>(g.nc), 0);
    for (int64_t k = 0; k < cfg.n_classes; ++k)
      if (cfg.classes[k] >= 0 && cfg.classes[k] < g.nc) host[static_cast<size_t>(cfg.classes[k])] = 1;
    engine::memcpy_between_devices(ok.as<void>(), dev, host.data(), engine::Device::cpu(), host.size());
  }
  const uint8_t* okp = ok.as<const uint8_t>();

  // 1. counts and offsets; the totals come back to size the sort.
  Scratch offsets(dev, sizeof(int64_t) * B * A), totals(dev, sizeof(int64_t) * B);
  Y9_LAUNCH(nms_count_kernel, dim3(static_cast<unsigned>(B)), dim3(kScanThreads), 0, st, pred, g, cfg.conf_thres,
            multi, okp, offsets.as<int64_t>(), totals.as<int64_t>());
  std::vector<int64_t> host_totals(static_cast<size_t>(B));
  engine::memcpy_between_devices(host_totals.data(), engine::Device::cpu(), totals.as<void>(), dev,
                                 sizeof(int64_t) * B);
  const int64_t max_total = *std::max_element(host_totals.begin(), host_totals.end());
  const int64_t M = std::min(max_total, std::max<int64_t>(cfg.max_nms, 0));
  if (M == 0) return zero_counts();

  // 2-3. keys, sorted per image.
  int64_t P = 1;
  while (P < max_total) P *= 2;
  Scratch keys(dev, sizeof(uint64_t) * B * P);
  Y9_LAUNCH(nms_fill_kernel, grid_for(B * P), kBlock, 0, st, keys.as<uint64_t>(), B * P);
  Y9_LAUNCH(nms_keys_kernel, grid_for(B * A), kBlock, 0, st, pred, g, cfg.conf_thres, multi, okp,
            offsets.as<const int64_t>(), P, keys.as<uint64_t>());
  if (P > 1) {
    const int64_t tile = std::min(P, kSortTile);
    const unsigned tile_blocks = static_cast<unsigned>(B * (P / tile)), tile_threads = static_cast<unsigned>(tile / 2);
    const size_t tile_bytes = sizeof(uint64_t) * tile;
    Y9_LAUNCH(nms_bitonic_tile_kernel, dim3(tile_blocks), dim3(tile_threads), tile_bytes, st, keys.as<uint64_t>(), P,
              tile, int64_t(2), tile, int64_t(1));  // every step up to k = tile
    for (int64_t k = 2 * tile; k <= P; k *= 2) {
      for (int64_t j = k / 2; j >= tile; j /= 2)  // pairs across tiles: one global launch per step
        Y9_LAUNCH(nms_bitonic_kernel, grid_for(B * P / 2), kBlock, 0, st, keys.as<uint64_t>(), B, P, k, j);
      Y9_LAUNCH(nms_bitonic_tile_kernel, dim3(tile_blocks), dim3(tile_threads), tile_bytes, st, keys.as<uint64_t>(), P,
                tile, k, k, tile / 2);  // the rest of this k inside the tiles
    }
  }

  // 4. boxes of the first M rows.
  Scratch xyxy(dev, sizeof(float) * 4 * B * M), shifted(dev, sizeof(float) * 4 * B * M),
      area(dev, sizeof(float) * B * M);
  Y9_LAUNCH(nms_gather_kernel, grid_for(B * M), kBlock, 0, st, pred, g, keys.as<const uint64_t>(), P,
            totals.as<const int64_t>(), M, cfg.agnostic ? 0.f : cfg.max_wh, xyxy.as<float>(), shifted.as<float>(),
            area.as<float>());

  // 5-6. mask and greedy pass, in chunks of images under the mask budget.
  const int64_t colb = ceil_div(M, kMaskBlock);
  Y9_CHECK_SHAPE(colb <= 65535, "nms_batched: max_nms ", cfg.max_nms, " too large for the mask grid on cuda");
  const int64_t per_image = M * colb * static_cast<int64_t>(sizeof(uint64_t));
  const int64_t chunk = std::clamp<int64_t>(mask_budget() / per_image, 1, B);
  Scratch mask(dev, static_cast<size_t>(chunk * per_image)), removed(dev, sizeof(uint64_t) * chunk * colb),
      keep(dev, sizeof(int32_t) * B * capacity);
  for (int64_t b0 = 0; b0 < B; b0 += chunk) {
    const int64_t nb = std::min(chunk, B - b0);
    const dim3 mask_grid(static_cast<unsigned>(colb), static_cast<unsigned>(colb), static_cast<unsigned>(nb));
    Y9_LAUNCH(nms_mask_kernel, mask_grid, dim3(kMaskBlock), 0, st, shifted.as<const float>(), area.as<const float>(),
              totals.as<const int64_t>(), M, colb, b0, cfg.iou_thres, mask.as<uint64_t>());
    Y9_LAUNCH(nms_greedy_kernel, dim3(static_cast<unsigned>(nb)), dim3(kGreedyThreads), 0, st, pred, g,
              keys.as<const uint64_t>(), P, totals.as<const int64_t>(), M, colb, b0, mask.as<const uint64_t>(),
              xyxy.as<const float>(), removed.as<uint64_t>(), keep.as<int32_t>(), capacity, out, counts);
  }
}

/// scale_boxes: one thread per (row, coordinate); the shared scale_box_coord arithmetic (a
/// subtraction and a division in double, no contraction possible), so rows equal the CPU twin's.
__global__ void scale_boxes_kernel(float* __restrict__ boxes, int64_t n, int64_t cols, ScaleBoxesParams p) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n * 4) return;
  const int k = static_cast<int>(t % 4);
  float* v = boxes + (t / 4) * cols + k;
  *v = scale_box_coord(*v, k, p);
}

void scale_boxes_cuda(engine::DeviceContext& ctx, float* boxes, int64_t n, int64_t cols, const ScaleBoxesParams& p) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  Y9_LAUNCH(scale_boxes_kernel, dim3(static_cast<unsigned>((n * 4 + kThreads - 1) / kThreads)), dim3(kThreads), 0,
            stream_of(ctx), boxes, n, cols, p);
}

}  // namespace

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kNmsBatched, &nms_batched_cuda, engine::DTypeSet{engine::DType::F32});
  b.add(kScaleBoxes, &scale_boxes_cuda, engine::DTypeSet{engine::DType::F32});
}

}  // namespace kernels::cuda
