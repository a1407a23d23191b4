// The CUDA backend: registers the CUDA device context (engine::CudaContext: compute, host-to-device
// and communication streams, events) and the per-device library state (cuBLAS/cuDNN handles on
// the compute stream, the shared workspace, the convolution algorithm cache; kernels/cuda/
// libraries.h). Kernel entries register themselves in their own files.
#include "engine/cuda_runtime.h"

namespace kernels::cuda {

Y9_REGISTER_KERNELS(engine::DeviceType::CUDA, b) {
  b.set_context_factory([](engine::Device d) { return std::make_unique<engine::CudaContext>(d); });
}

}  // namespace kernels::cuda
