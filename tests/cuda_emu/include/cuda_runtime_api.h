// CUDA-on-CPU emulator (docs/cuda_emulator.md): the subset of the CUDA runtime API the engine
// uses, declared for the host compiler. It shadows the toolkit's cuda_runtime_api.h in a build
// configured with -DY9_CUDA_EMULATOR=ON (this folder comes first on the include path). Every
// function returns cudaSuccess or an error code as the real runtime does; the emulator keeps its
// own "device" allocations, streams and events in host memory (tests/cuda_emu/cuda_emu.cpp).
#pragma once
// The toolkit header's include guard: cuda_fp16.h/cuda_bf16.h (which may be used from the toolkit
// under the emulator) include the real cuda_runtime_api.h by a quoted path; this makes it empty.
#define __CUDA_RUNTIME_API_H__
#include <cstddef>

#define Y9_CUDA_EMULATED 1
#define CUDART_VERSION 13000

/// Error codes: the values of the real runtime for the codes the emulator returns.
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

/// Device facts reported by cudaGetDeviceProperties (the fields the emulator fills).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
};

enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2 };
/// cudaPointerGetAttributes: the kind of a pointer (device allocation, pinned host, plain host).
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

// --- devices and errors ------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count);  ///< always 1 emulated device
cudaError_t cudaSetDevice(int device);       ///< cudaErrorInvalidDevice unless device == 0
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceSynchronize();  ///< runs the queued work of every stream
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaGetLastError();   ///< returns and clears the last launch/API error
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t err);
/// The runtime's text; for cudaErrorLaunchFailure and the refused calls it is the emulator's
/// detailed message of the latest failure (file:line, threads, lines).
const char* cudaGetErrorString(cudaError_t err);

// --- memory --------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t nbytes);  ///< a tracked "device" allocation (256-aligned)
cudaError_t cudaFree(void* ptr);                    ///< synchronises the device first, as the real one
cudaError_t cudaMallocHost(void** ptr, size_t nbytes);
cudaError_t cudaHostAlloc(void** ptr, size_t nbytes, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr);
/// Blocking copy: runs the default stream's queued work first. The direction must match the
/// pointers' kinds (cudaErrorInvalidMemcpyDirection otherwise) and device ranges must lie inside
/// one allocation (cudaErrorInvalidValue).
cudaError_t cudaMemcpy(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind);
/// Queued on `stream`; runs at the next synchronisation point of that stream (checks at call time).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind, cudaStream_t stream = 0);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t nbytes,
                                cudaStream_t stream = 0);
cudaError_t cudaMemset(void* ptr, int value, size_t nbytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t nbytes, cudaStream_t stream = 0);

// --- streams and events --------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);  ///< runs the stream's queued work
cudaError_t cudaStreamQuery(cudaStream_t stream);        ///< cudaErrorNotReady while work is queued
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
using cudaHostFn_t = void (*)(void* userData);
/// Queues a host function on `stream`; it runs when the stream is drained (a synchronisation).
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);  ///< runs the recording stream up to the event
cudaError_t cudaEventQuery(cudaEvent_t event);        ///< cudaErrorNotReady until the event ran
