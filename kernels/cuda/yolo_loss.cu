// CUDA entries of one branch of the YOLOv9 TAL loss (kernels/common/yolo_loss.h): the DFL decode,
// the fused BCE + CIoU + DFL sums and their backward, over the same Y9_HD per-anchor math as the
// CPU twin (kernels/cpu/yolo_loss.cpp). Source: official utils/loss_tal.py ComputeLoss and
// BboxLoss, utils/metrics.py bbox_iou. No host reads: the sums stay in device memory, a one-thread
// kernel turns them into target_scores_sum and the loss items, and the backward reads
// target_scores_sum and the incoming gradient on the device.
//
// The forward's reduction is deterministic without atomics: each block takes a chunk of one image's
// anchors, its threads accumulate contiguous runs of anchors in double (the CPU's order within a
// run), thread 0 adds the threads' partials in thread order; a one-thread pass then adds the
// chunks of each image in order and the images in order (the CPU adds per image, then in image
// order). Repeated runs give identical bits.
#include <cuda_runtime.h>

#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/common/yolo_loss.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

namespace {

constexpr int kLossBlock = 256;
constexpr int64_t kAnchorsPerThread = 8;                          // contiguous run per thread
constexpr int64_t kAnchorsPerBlock = kLossBlock * kAnchorsPerThread;  // one chunk of an image

template <typename T>
__global__ void yolo_decode_kernel(const T* __restrict__ pred, const T* __restrict__ anc,
                                   const T* __restrict__ stride, int64_t B, int64_t A, int64_t nc, int reg,
                                   T* __restrict__ scores, T* __restrict__ box_grid, T* __restrict__ box_px) {
  const int64_t no = 4 * reg + nc;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < B * A; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t a = i % A;
    yolo_decode_one<T>(pred + i * no, anc[a * 2], anc[a * 2 + 1], stride[a], nc, reg, scores + i * nc,
                       box_grid + i * 4, box_px + i * 4);
  }
}

// Block (chunk c of image b) -> part[(b * nchunk + c) * 4 + j], j = (ts_sum, cls, box, dfl).
template <typename T>
__global__ void yolo_loss_partial_kernel(const T* __restrict__ pred, const T* __restrict__ box_grid,
                                         const T* __restrict__ anc, const T* __restrict__ stride,
                                         const T* __restrict__ target_bboxes, const T* __restrict__ target_scores,
                                         const bool* __restrict__ fg, int64_t A, int64_t nc, int reg, int64_t nchunk,
                                         double* __restrict__ part) {
  __shared__ double acc[4][kLossBlock];
  const int64_t no = 4 * reg + nc;
  const int64_t b = blockIdx.x / nchunk, c = blockIdx.x % nchunk;
  const int64_t a0 = c * kAnchorsPerBlock + threadIdx.x * kAnchorsPerThread;
  int64_t a1 = a0 + kAnchorsPerThread;
  a1 = a1 < A ? a1 : A;
  double ts_sum = 0, cls = 0, box = 0, dfl = 0;
  for (int64_t a = a0; a < a1; ++a) {
    const int64_t i = b * A + a;
    yolo_anchor_loss_add<T>(pred + i * no, box_grid + i * 4, anc[a * 2], anc[a * 2 + 1], stride[a],
                            target_bboxes + i * 4, target_scores + i * nc, fg[i], nc, reg, ts_sum, cls, box, dfl);
  }
  acc[0][threadIdx.x] = ts_sum;
  acc[1][threadIdx.x] = cls;
  acc[2][threadIdx.x] = box;
  acc[3][threadIdx.x] = dfl;
  __syncthreads();
  if (threadIdx.x < 4) {  // thread j adds quantity j over the threads in thread order
    double s = 0;
    for (int t = 0; t < kLossBlock; ++t) s += acc[threadIdx.x][t];
    part[blockIdx.x * 4 + threadIdx.x] = s;
  }
}

// One thread: chunks in order within each image, then images in order; sums = (ts, box, cls, dfl).
__global__ void yolo_loss_final_kernel(const double* __restrict__ part, int64_t B, int64_t nchunk,
                                       double* __restrict__ sums) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double tot[4] = {0, 0, 0, 0};
  for (int64_t b = 0; b < B; ++b) {
    double img[4] = {0, 0, 0, 0};
    for (int64_t c = 0; c < nchunk; ++c)
      for (int j = 0; j < 4; ++j) img[j] += part[(b * nchunk + c) * 4 + j];
    for (int j = 0; j < 4; ++j) tot[j] += img[j];
  }
  sums[0] = tot[0];
  sums[1] = tot[2];
  sums[2] = tot[1];
  sums[3] = tot[3];
}

// Host constants of the finishing and backward kernels, passed by value as kernel parameters.
struct Gains {
  double v[3];
};
struct BranchWeights {
  double v[kYoloLossMaxBranches];
};

// One thread: tss [K] and out [4] from the sums (yolo_loss_finish_one).
template <typename T>
__global__ void yolo_loss_finish_kernel(const double* __restrict__ sums, int64_t K, BranchWeights w, Gains gains,
                                        double loss_batch, T* __restrict__ tss, T* __restrict__ out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  yolo_loss_finish_one<T>(sums, K, w.v, gains.v, loss_batch, tss, out);
}

template <typename T>
__global__ void yolo_loss_backward_kernel(const T* __restrict__ pred, const T* __restrict__ box_grid,
                                          const T* __restrict__ anc, const T* __restrict__ stride,
                                          const T* __restrict__ target_bboxes, const T* __restrict__ target_scores,
                                          const bool* __restrict__ fg, const T* __restrict__ tss, int64_t B,
                                          int64_t A, int64_t nc, int reg, const T* __restrict__ grad_out,
                                          double branch_weight, Gains gains, double loss_batch,
                                          T* __restrict__ grad_pred) {
  const int64_t no = 4 * reg + nc;
  const T inv = T(1) / *tss;
  T cb, cc, cd;  // every thread derives them from the device-side incoming gradient (4 loads)
  yolo_loss_grad_coef<T>(grad_out, branch_weight, gains.v, loss_batch, inv, cb, cc, cd);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < B * A; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t a = i % A;
    yolo_anchor_loss_grad<T>(pred + i * no, box_grid + i * 4, anc[a * 2], anc[a * 2 + 1], stride[a],
                             target_bboxes + i * 4, target_scores + i * nc, fg[i], nc, reg, cb, cc, cd,
                             grad_pred + i * no);
  }
}

template <typename F>
void float_or_double_cuda(engine::DType dt, const char* what, F&& f) {
  if (dt == engine::DType::F32) f.template operator()<float>();
  else if (dt == engine::DType::F64) f.template operator()<double>();
  else Y9_CHECK_SHAPE(false, what, ": dtype ", engine::dtype_name(dt), " not supported on cuda (f32, f64)");
}

using engine::DeviceContext;
using engine::DType;

void decode_entry(DeviceContext& ctx, DType dt, const void* pred, const void* anc, const void* stride, int64_t B,
                  int64_t A, int64_t nc, int reg, void* scores, void* box_grid, void* box_px) {
  if (B * A == 0) return;
  auto st = static_cast<cudaStream_t>(ctx.stream());
  float_or_double_cuda(dt, "yolo_decode", [&]<typename T>() {
    Y9_LAUNCH(yolo_decode_kernel<T>, grid_for(B * A), kBlock, 0, st, static_cast<const T*>(pred),
              static_cast<const T*>(anc), static_cast<const T*>(stride), B, A, nc, reg, static_cast<T*>(scores),
              static_cast<T*>(box_grid), static_cast<T*>(box_px));
  });
}

void forward_entry(DeviceContext& ctx, DType dt, const void* pred, const void* box_grid, const void* anc,
                   const void* stride, const void* target_bboxes, const void* target_scores, const bool* fg, int64_t B,
                   int64_t A, int64_t nc, int reg, double* sums) {
  auto st = static_cast<cudaStream_t>(ctx.stream());
  const int64_t nchunk = A > 0 ? ceil_div(A, kAnchorsPerBlock) : 0;
  // Per-chunk partials in a stream-ordered scratch tensor (the caching allocator reuses blocks on
  // the one compute stream, so freeing it after queuing the kernels is safe).
  engine::Tensor part = engine::Tensor::empty({B * nchunk * 4 > 0 ? B * nchunk * 4 : 1}, DType::F64, ctx.device());
  float_or_double_cuda(dt, "yolo_branch_loss_forward", [&]<typename T>() {
    if (B * nchunk > 0)
      Y9_LAUNCH(yolo_loss_partial_kernel<T>, static_cast<unsigned>(B * nchunk), kLossBlock, 0, st,
                static_cast<const T*>(pred), static_cast<const T*>(box_grid), static_cast<const T*>(anc),
                static_cast<const T*>(stride), static_cast<const T*>(target_bboxes),
                static_cast<const T*>(target_scores), fg, A, nc, reg, nchunk, static_cast<double*>(part.data_ptr()));
  });
  Y9_LAUNCH(yolo_loss_final_kernel, 1, 1, 0, st, static_cast<const double*>(part.data_ptr()), B, nchunk, sums);
}

void backward_entry(DeviceContext& ctx, DType dt, const void* pred, const void* box_grid, const void* anc,
                    const void* stride, const void* target_bboxes, const void* target_scores, const bool* fg,
                    const void* tss, int64_t B, int64_t A, int64_t nc, int reg, const void* grad_out,
                    double branch_weight, const double* gains, int64_t loss_batch, void* grad_pred) {
  if (B * A == 0) return;
  auto st = static_cast<cudaStream_t>(ctx.stream());
  const Gains g{{gains[0], gains[1], gains[2]}};
  float_or_double_cuda(dt, "yolo_branch_loss_backward", [&]<typename T>() {
    Y9_LAUNCH(yolo_loss_backward_kernel<T>, grid_for(B * A), kBlock, 0, st, static_cast<const T*>(pred),
              static_cast<const T*>(box_grid), static_cast<const T*>(anc), static_cast<const T*>(stride),
              static_cast<const T*>(target_bboxes), static_cast<const T*>(target_scores), fg,
              static_cast<const T*>(tss), B, A, nc, reg, static_cast<const T*>(grad_out), branch_weight, g,
              static_cast<double>(loss_batch), static_cast<T*>(grad_pred));
  });
}

void finish_entry(DeviceContext& ctx, DType dt, const double* sums, int64_t K, const double* branch_weights,
                  const double* gains, int64_t loss_batch, void* tss, void* out) {
  Y9_CHECK_SHAPE(K >= 0 && K <= kYoloLossMaxBranches, "yolo_loss_finish: ", K, " branches (at most ",
                 kYoloLossMaxBranches, " on cuda)");
  auto st = static_cast<cudaStream_t>(ctx.stream());
  BranchWeights w{};
  for (int64_t k = 0; k < K; ++k) w.v[k] = branch_weights[k];
  const Gains g{{gains[0], gains[1], gains[2]}};
  float_or_double_cuda(dt, "yolo_loss_finish", [&]<typename T>() {
    Y9_LAUNCH(yolo_loss_finish_kernel<T>, 1, 1, 0, st, sums, K, w, g, static_cast<double>(loss_batch),
              static_cast<T*>(tss), static_cast<T*>(out));
  });
}

}  // namespace

/// CUDA yolo_decode, yolo_branch_loss_forward (deterministic double sums in device memory),
/// yolo_loss_finish (one thread) and yolo_branch_loss_backward (coefficients from the
/// device-side incoming gradient), F32 and F64, on the context's compute stream; no host reads.
Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.add(kYoloDecode, &decode_entry, engine::kF32F64);
  b.add(kYoloBranchLossForward, &forward_entry, engine::kF32F64);
  b.add(kYoloBranchLossBackward, &backward_entry, engine::kF32F64);
  b.add(kYoloLossFinish, &finish_entry, engine::kF32F64);
}

}  // namespace kernels::cuda
