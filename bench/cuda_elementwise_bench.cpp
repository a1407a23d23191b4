// Google Benchmark: achieved GB/s of the CUDA add and SiLU kernels at the YOLOv9 activation size
// 1x64x160x160 (F32, F16), against a device-to-device memcpy of the same bytes measured in the
// same run. CUDA-event timing of the kernel only, L2 flushed before each repeat (guide 3.10).
// Without a GPU (or a CUDA build) every case reports SkipWithError.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "engine/allocator.h"
#include "engine/device.h"
#include "engine/dtype.h"

#if defined(Y9_WITH_CUDA)
#include <cuda_runtime.h>

#include "engine/cuda_runtime.h"
#include "engine/core_kernels.h"
#include "kernels/common/elementwise.h"
#endif

namespace {

constexpr int64_t kN = 1LL * 64 * 160 * 160;

enum class Kind { Add, Silu, Memcpy };

bool skip_without_gpu(benchmark::State& state) {
  if (!engine::cuda_compiled()) {
    state.SkipWithError("built without the CUDA backend");
    return true;
  }
  if (engine::cuda_device_count() == 0) {
    state.SkipWithError("no CUDA device visible");
    return true;
  }
  return false;
}

void run(benchmark::State& state, Kind kind, engine::DType dt) {
  if (skip_without_gpu(state)) return;
#if defined(Y9_WITH_CUDA)
  const size_t bytes = static_cast<size_t>(kN) * engine::dtype_size(dt);
  auto* alloc = engine::cuda_allocator(0);
  void* a = alloc->allocate(bytes);
  void* b = alloc->allocate(bytes);
  void* out = alloc->allocate(bytes);
  const size_t flush_bytes = size_t(256) << 20;  // > L2 of A100 (40 MB) / H100-H200 (50 MB)
  void* flush = alloc->allocate(flush_bytes);
  const engine::Device cuda0 = engine::Device::cuda(0);
  cudaStream_t s = engine::cuda_stream(0);
  auto fill = engine::kernel(engine::kFillStrided, dt, cuda0);
  auto add = engine::kernel(kernels::kBinaryForward, dt, cuda0);
  auto unary = engine::kernel(kernels::kUnaryForward, dt, cuda0);
  kernels::StridedLayout l;
  l.ndim = 1;
  l.sizes[0] = kN;
  l.strides[0] = 1;
  fill.fn(fill.ctx, a, dt, l, 0.5);
  fill.fn(fill.ctx, b, dt, l, -1.25);
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  auto launch = [&] {
    switch (kind) {
      case Kind::Add: add.fn(add.ctx, kernels::BinaryOp::Add, dt, out, l, a, l, b, l); break;
      case Kind::Silu: unary.fn(unary.ctx, kernels::UnaryOp::Silu, dt, 0.0, 0.0, out, l, a, l); break;
      case Kind::Memcpy: CUDA_CHECK(cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToDevice, s)); break;
    }
  };
  launch();  // warm-up
  const double moved = static_cast<double>(bytes) * (kind == Kind::Add ? 3 : 2);
  for (auto _ : state) {
    CUDA_CHECK(cudaMemsetAsync(flush, 0, flush_bytes, s));
    CUDA_CHECK(cudaEventRecord(e0, s));
    launch();
    CUDA_CHECK(cudaEventRecord(e1, s));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    state.SetIterationTime(ms / 1e3);
  }
  state.SetBytesProcessed(static_cast<int64_t>(moved) * state.iterations());
  state.counters["GB/s"] = benchmark::Counter(moved * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
    int mem_clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, dev);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev);
    double peak = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // DDR: two transfers per clock
    if (peak > 0) state.counters["peak_GB/s"] = peak;
    state.SetLabel(prop.name);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  alloc->deallocate(flush, flush_bytes);
  alloc->deallocate(out, bytes);
  alloc->deallocate(b, bytes);
  alloc->deallocate(a, bytes);
#else
  (void)kind;
  (void)dt;
#endif
}

void BM_cuda_add_f32(benchmark::State& st) { run(st, Kind::Add, engine::DType::F32); }
void BM_cuda_add_f16(benchmark::State& st) { run(st, Kind::Add, engine::DType::F16); }
void BM_cuda_silu_f32(benchmark::State& st) { run(st, Kind::Silu, engine::DType::F32); }
void BM_cuda_silu_f16(benchmark::State& st) { run(st, Kind::Silu, engine::DType::F16); }
void BM_cuda_memcpy_baseline_f32(benchmark::State& st) { run(st, Kind::Memcpy, engine::DType::F32); }

BENCHMARK(BM_cuda_add_f32)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_add_f16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_silu_f32)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_silu_f16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_memcpy_baseline_f32)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
