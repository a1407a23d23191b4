// The CPU backend: registers the CPU device context (synchronous "streams"; the oneDNN state is
// attached on first use by kernels/cpu/conv.cpp). Kernel entries register themselves in their
// own files (Y9_REGISTER_KERNELS).
#include "engine/backend.h"

namespace kernels::cpu {

Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) {
  b.set_context_factory([](engine::Device d) { return std::make_unique<engine::DeviceContext>(d); });
}

}  // namespace kernels::cpu
