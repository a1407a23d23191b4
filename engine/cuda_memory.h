// The memory of a CUDA device as the runtime reports it (cudaGetDeviceProperties name,
// cudaMemGetInfo), for AutoBatch and the out-of-memory advice of the trainer
// (apps/training/autobatch.h). Declared apart from engine/device.h so that it needs no CUDA
// headers; defined in engine/cuda_runtime.cpp.
#pragma once
#include <cstdint>
#include <string>

namespace engine {

/// Memory of one CUDA device, in bytes.
struct CudaMemoryInfo {
  std::string name;         ///< "NVIDIA H200" (the emulator: "CUDA emulator (CPU)")
  int64_t total_bytes = 0;  ///< device memory as cudaMemGetInfo reports it
  int64_t free_bytes = 0;   ///< free for any process now (blocks our allocator caches count as used)
};

/// The memory of CUDA device `index`. Throws CudaError when the device cannot be used (the reason
/// of cuda_unavailable_reason) or the runtime fails, Error in a build without the CUDA backend.
CudaMemoryInfo cuda_memory_info(int index);

}  // namespace engine
