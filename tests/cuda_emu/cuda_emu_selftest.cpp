// Self-test of the CUDA-on-CPU emulator (label emu; built only with -DY9_CUDA_EMULATOR=ON, run in
// both thread orders): barrier and warp-shuffle reductions, the reports of a divergent barrier, of
// a thread that exits before a barrier and of a lane missing from a shuffle's mask, stale data
// after a missing stream sync, refused copy directions, atomics, dynamic shared memory poison,
// events across streams, and launch-configuration errors through Y9_LAUNCH.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cuda_runtime.h"
#include "engine/error.h"
#include "engine/half.h"
#include "kernels/cuda/launch.cuh"

#if defined(Y9_EMU_HAVE_CUDA_FP16)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace {

#define EMU_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaPeekAtLastError())

// --- kernels ------------------------------------------------------------------------------------

// Block tree reduction in shared memory: out[blockIdx.x] = sum of the block's inputs.
__global__ void block_sum_kernel(const float* in, float* out, int n) {
  __shared__ float s[256];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// Warp reductions: shuffle-down sum, xor-butterfly max, and the votes.
__global__ void warp_kernel(const int* in, int* sum, int* mx, unsigned* ballot, int* any, int* all) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int v = in[threadIdx.x];
  int s = v;
  for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
  int m = v;
  for (int o = 16; o > 0; o /= 2) m = std::max(m, __shfl_xor_sync(0xffffffffu, m, o));
  const unsigned b = __ballot_sync(0xffffffffu, v % 2 == 0);
  const int a = __any_sync(0xffffffffu, v > 90);
  const int l = __all_sync(0xffffffffu, v >= 0);
  const int first = __shfl_sync(0xffffffffu, v, 0);
  const int up = __shfl_up_sync(0xffffffffu, v, 1);
  __syncwarp();
  if (lane == 0) {
    sum[warp] = s;
    ballot[warp] = b;
    any[warp] = a;
    all[warp] = l;
  }
  if (lane == 31) mx[warp] = m + (first - in[warp * 32]) + (up - in[threadIdx.x - 1]);  // both terms are 0
}

constexpr int kDivergeLineOne = __LINE__ + 4;
constexpr int kDivergeLineOthers = __LINE__ + 5;
__global__ void diverge_kernel(int* out) {
  if (threadIdx.x == 1) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void exit_early_kernel(int* out) {
  if (threadIdx.x == 3) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

constexpr int kMaskLine = __LINE__ + 4;
__global__ void missing_lane_kernel(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x == 5) return;
  v = __shfl_down_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

__global__ void add_kernel(float* d, int n, float k) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] += k;
}

__global__ void atomic_kernel(int* count, float* fsum, int* mx, unsigned* cas) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(count, 1);
  atomicAdd(fsum, 0.5f);
  atomicMax(mx, i);
  unsigned old = *cas, seen;
  do {
    seen = old;
    old = atomicCAS(cas, seen, seen + 2u);
  } while (old != seen);
}

__global__ void dyn_shared_kernel(uint32_t* out) {
  Y9_DYNAMIC_SHARED(uint32_t, s);
  out[threadIdx.x] = s[threadIdx.x];  // read before any write: the poison pattern
  __syncthreads();
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[blockDim.x + threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

// An unsynchronised race: every thread writes the same cell; the winner depends on the order.
__global__ void race_kernel(int* out) { out[0] = threadIdx.x; }

#if defined(Y9_EMU_HAVE_CUDA_FP16)
// The toolkit's half types in device code: round-trip through __half and __nv_bfloat16.
__global__ void half_kernel(const float* in, uint16_t* h, uint16_t* b, float* back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half x = __float2half_rn(in[i]);
  __nv_bfloat16 y = __float2bfloat16_rn(in[i]);
  h[i] = __half_as_ushort(x);
  b[i] = __bfloat16_as_ushort(y);
  back[i] = __half2float(x + x);
}
#endif

// --- helpers ---------------------------------------------------------------------------------------

template <typename T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Launches on the default stream, synchronises and returns the error message ("" on success).
template <typename... P, typename... A>
std::string run_and_sync(void (*k)(P...), dim3 grid, dim3 block, A... args) {
  Y9_LAUNCH(k, grid, block, 0, nullptr, args...);
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return "";
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

TEST(CudaEmu, OneDeviceWithProperties) {
  int n = 0;
  EMU_OK(cudaGetDeviceCount(&n));
  EXPECT_EQ(n, 1);
  cudaDeviceProp p;
  EMU_OK(cudaGetDeviceProperties(&p, 0));
  EXPECT_EQ(p.warpSize, 32);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(engine::cuda_device_count(), 1);
}

TEST(CudaEmu, BlockReductionWithBarriers) {
  const int n = 1000, threads = 256, blocks = (n + threads - 1) / threads;
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i % 17);
  float* in = dev_alloc<float>(n);
  float* out = dev_alloc<float>(blocks);
  EMU_OK(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  EXPECT_EQ(run_and_sync(block_sum_kernel, blocks, threads, (const float*)in, out, n), "");
  auto r = download(out, blocks);
  for (int b = 0; b < blocks; ++b) {
    float want = 0;
    for (int i = b * threads; i < std::min(n, (b + 1) * threads); ++i) want += h[i];
    EXPECT_EQ(r[b], want) << "block " << b;
  }
  cudaFree(in);
  cudaFree(out);
}

TEST(CudaEmu, WarpShuffleReductionAndVotes) {
  const int threads = 64;
  std::vector<int> h(threads);
  for (int i = 0; i < threads; ++i) h[i] = (i * 37) % 101;
  int* in = dev_alloc<int>(threads);
  int *sum = dev_alloc<int>(2), *mx = dev_alloc<int>(2), *any = dev_alloc<int>(2), *all = dev_alloc<int>(2);
  unsigned* ballot = dev_alloc<unsigned>(2);
  EMU_OK(cudaMemcpy(in, h.data(), threads * sizeof(int), cudaMemcpyHostToDevice));
  EXPECT_EQ(run_and_sync(warp_kernel, 1, threads, (const int*)in, sum, mx, ballot, any, all), "");
  auto s = download(sum, 2), m = download(mx, 2), a = download(any, 2), l = download(all, 2);
  auto b = download(ballot, 2);
  for (int w = 0; w < 2; ++w) {
    int ws = 0, wm = 0, wa = 0;
    unsigned wb = 0;
    for (int k = 0; k < 32; ++k) {
      const int v = h[w * 32 + k];
      ws += v;
      wm = std::max(wm, v);
      wa |= v > 90;
      if (v % 2 == 0) wb |= 1u << k;
    }
    EXPECT_EQ(s[w], ws);
    EXPECT_EQ(m[w], wm);
    EXPECT_EQ(b[w], wb);
    EXPECT_EQ(a[w], wa);
    EXPECT_EQ(l[w], 1);
  }
  for (void* p : {(void*)in, (void*)sum, (void*)mx, (void*)any, (void*)all, (void*)ballot}) cudaFree(p);
}

TEST(CudaEmu, DivergentBarrierIsReportedWithLines) {
  int* out = dev_alloc<int>(64);
  const std::string msg = run_and_sync(diverge_kernel, 1, 64, out);
  const std::string file = "cuda_emu_selftest.cpp:";
  EXPECT_NE(msg.find("cudaErrorLaunchFailure"), std::string::npos) << msg;
  EXPECT_NE(msg.find("__syncthreads divergence in block (0,0,0): thread 1 at " + file +
                     std::to_string(kDivergeLineOne) + ", the others at " + file + std::to_string(kDivergeLineOthers)),
            std::string::npos)
      << msg;
  // The device works on after a failed kernel.
  EXPECT_EQ(run_and_sync(race_kernel, 1, 1, out), "");
  cudaFree(out);
}

TEST(CudaEmu, ThreadExitedBeforeBarrierIsReported) {
  int* out = dev_alloc<int>(32);
  const std::string msg = run_and_sync(exit_early_kernel, 1, 32, out);
  EXPECT_NE(msg.find("thread 3 exited while the others wait at the barrier"), std::string::npos) << msg;
  cudaFree(out);
}

TEST(CudaEmu, LaneMissingFromShuffleMaskIsReported) {
  int* out = dev_alloc<int>(32);
  const std::string msg = run_and_sync(missing_lane_kernel, 1, 32, out);
  EXPECT_NE(msg.find("__shfl_down_sync at cuda_emu_selftest.cpp:" + std::to_string(kMaskLine) +
                     " (mask 0xffffffff) in block (0,0,0), warp 0: lane 5 named in the mask never arrives (it has "
                     "exited)"),
            std::string::npos)
      << msg;
  // A mask naming lanes a 16-thread block does not have.
  const std::string msg2 = run_and_sync(warp_kernel, 1, 16, (const int*)out, out, out, (unsigned*)out, out, out);
  EXPECT_NE(msg2.find("which does not exist (16 threads per block)"), std::string::npos) << msg2;
  cudaFree(out);
}

TEST(CudaEmu, MissingStreamSyncGivesStaleData) {
  cudaStream_t s;
  EMU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int n = 8;
  std::vector<float> h(n, 1.f), back(n, -7.f);
  float* d = dev_alloc<float>(n);
  EMU_OK(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  Y9_LAUNCH(add_kernel, 1, 32, 0, s, d, n, 2.f);
  EMU_OK(cudaMemcpyAsync(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  // No synchronisation yet: the host buffer still holds what it held (stale data).
  for (float v : back) EXPECT_EQ(v, -7.f);
  // Syncing another stream does not help; syncing this one does.
  EMU_OK(cudaStreamSynchronize(nullptr));
  EXPECT_EQ(back[0], -7.f);
  EMU_OK(cudaStreamSynchronize(s));
  for (float v : back) EXPECT_EQ(v, 3.f);
  EMU_OK(cudaStreamDestroy(s));
  cudaFree(d);
}

TEST(CudaEmu, EventOrdersStreams) {
  cudaStream_t a, b;
  EMU_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  EMU_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t e;
  EMU_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  float* d = dev_alloc<float>(4);
  EMU_OK(cudaMemsetAsync(d, 0, 4 * sizeof(float), a));
  Y9_LAUNCH(add_kernel, 1, 4, 0, a, d, 4, 5.f);
  EMU_OK(cudaEventRecord(e, a));
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  std::vector<float> h(4, 0.f);
  EMU_OK(cudaStreamWaitEvent(b, e, 0));
  EMU_OK(cudaMemcpyAsync(h.data(), d, 4 * sizeof(float), cudaMemcpyDeviceToHost, b));
  EMU_OK(cudaStreamSynchronize(b));  // runs a's work up to the event first
  for (float v : h) EXPECT_EQ(v, 5.f);
  EMU_OK(cudaEventSynchronize(e));
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  EMU_OK(cudaEventDestroy(e));
  EMU_OK(cudaStreamDestroy(a));
  EMU_OK(cudaStreamDestroy(b));
  cudaFree(d);
}

// As in CUDA, an event destroyed while its record and a wait on it are still queued keeps ordering
// the streams (engine::upload_async destroys its local event at once), and is freed afterwards
// (the ASan build's leak check would report it otherwise).
TEST(CudaEmu, DestroyedPendingEventStillOrdersStreams) {
  cudaStream_t a, b;
  EMU_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  EMU_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t e;
  EMU_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  float* d = dev_alloc<float>(4);
  EMU_OK(cudaMemsetAsync(d, 0, 4 * sizeof(float), a));
  Y9_LAUNCH(add_kernel, 1, 4, 0, a, d, 4, 7.f);
  EMU_OK(cudaEventRecord(e, a));
  EMU_OK(cudaStreamWaitEvent(b, e, 0));
  EMU_OK(cudaEventDestroy(e));  // both still queued
  std::vector<float> h(4, 0.f);
  EMU_OK(cudaMemcpyAsync(h.data(), d, 4 * sizeof(float), cudaMemcpyDeviceToHost, b));
  EMU_OK(cudaStreamSynchronize(b));
  for (float v : h) EXPECT_EQ(v, 7.f);
  EMU_OK(cudaStreamSynchronize(a));
  EMU_OK(cudaStreamDestroy(a));
  EMU_OK(cudaStreamDestroy(b));
  cudaFree(d);
}

TEST(CudaEmu, WrongCopyDirectionIsRefused) {
  float* d = dev_alloc<float>(4);
  std::vector<float> h(4, 0.f);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 16, cudaMemcpyDeviceToHost), cudaErrorInvalidMemcpyDirection);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorInvalidMemcpyDirection)).find("cudaMemcpyDeviceToHost but dst"),
            std::string::npos);
  EXPECT_EQ(cudaMemcpy(h.data(), d, 16, cudaMemcpyHostToDevice), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpyAsync(d, h.data(), 16, cudaMemcpyDeviceToDevice, nullptr), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 32, cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // past the end
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidDevicePointer);
  cudaGetLastError();
  // Through the engine: the error surfaces as engine::CudaError naming the call.
  EXPECT_THROW(CUDA_CHECK(cudaMemcpy(h.data(), d, 16, cudaMemcpyHostToDevice)), engine::CudaError);
  cudaGetLastError();
  cudaFree(d);
}

TEST(CudaEmu, AtomicsAddUp) {
  int* count = dev_alloc<int>(1);
  float* fsum = dev_alloc<float>(1);
  int* mx = dev_alloc<int>(1);
  unsigned* cas = dev_alloc<unsigned>(1);
  EMU_OK(cudaMemset(count, 0, 4));
  EMU_OK(cudaMemset(fsum, 0, 4));
  EMU_OK(cudaMemset(mx, 0, 4));
  EMU_OK(cudaMemset(cas, 0, 4));
  EXPECT_EQ(run_and_sync(atomic_kernel, 4, 256, count, fsum, mx, cas), "");
  EXPECT_EQ(download(count, 1)[0], 1024);
  EXPECT_EQ(download(fsum, 1)[0], 512.f);
  EXPECT_EQ(download(mx, 1)[0], 1023);
  EXPECT_EQ(download(cas, 1)[0], 2048u);
  for (void* p : {(void*)count, (void*)fsum, (void*)mx, (void*)cas}) cudaFree(p);
}

TEST(CudaEmu, DynamicSharedMemoryIsPoisoned) {
  const int threads = 16;
  uint32_t* out = dev_alloc<uint32_t>(2 * threads * 2);
  Y9_LAUNCH(dyn_shared_kernel, 2, threads, threads * sizeof(uint32_t), nullptr, out);
  EMU_OK(cudaDeviceSynchronize());
  auto r = download(out, 2 * threads);
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(r[t], 0xFFFFFFFFu) << "thread " << t;  // the poison, also in the second block
    EXPECT_EQ(r[threads + t], static_cast<uint32_t>(threads - 1 - t));
  }
  float poison;
  std::memset(&poison, cuda_emu::kSharedPoison, sizeof poison);
  EXPECT_TRUE(std::isnan(poison));
  cudaFree(out);
}

TEST(CudaEmu, BadLaunchConfigurationThrowsAtTheLaunch) {
  int* out = dev_alloc<int>(1);
  EXPECT_THROW(Y9_LAUNCH(race_kernel, 1, 2048, 0, nullptr, out), engine::CudaError);
  EXPECT_THROW(Y9_LAUNCH(race_kernel, 1, 32, 1 << 20, nullptr, out), engine::CudaError);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the check consumed the error
  cudaFree(out);
}

#if defined(Y9_EMU_HAVE_CUDA_FP16)
TEST(CudaEmu, ToolkitHalfTypesCompileAndRoundLikeTheEngine) {
  const int n = 9;
  std::vector<float> h = {0.f, 1.f, -2.5f, 3.14159f, 65504.f, 1e-5f, -1e-8f, 70000.f, 0.333333f};
  float* in = dev_alloc<float>(n);
  uint16_t *hb = dev_alloc<uint16_t>(n), *bb = dev_alloc<uint16_t>(n);
  float* back = dev_alloc<float>(n);
  EMU_OK(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  EXPECT_EQ(run_and_sync(half_kernel, 1, 32, (const float*)in, hb, bb, back, n), "");
  auto rh = download(hb, n), rb = download(bb, n);
  auto rback = download(back, n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(rh[i], engine::f32_to_f16(h[i])) << h[i];
    EXPECT_EQ(rb[i], engine::f32_to_bf16(h[i])) << h[i];
    EXPECT_EQ(rback[i], engine::f16_to_f32(engine::f32_to_f16(2 * engine::f16_to_f32(engine::f32_to_f16(h[i])))))
        << h[i];
  }
  for (void* p : {(void*)in, (void*)hb, (void*)bb, (void*)back}) cudaFree(p);
}
#endif

TEST(CudaEmu, ThreadOrderDecidesAnUnsynchronisedRace) {
  int* out = dev_alloc<int>(1);
  EXPECT_EQ(run_and_sync(race_kernel, 1, 256, out), "");
  // Forward order: the last thread writes last; reverse order: thread 0 does. A kernel whose
  // result differs between the two orders has a race; the parity tests run in both.
  EXPECT_EQ(download(out, 1)[0], cuda_emu::reverse_order() ? 0 : 255);
  cudaFree(out);
}

}  // namespace
