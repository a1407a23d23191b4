// oneDNN's effective instruction set on this CPU, for the entries that choose by it (the channel
// block of the blocked layout, BF16 convolutions).
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

namespace kernels::cpu {

/// Whether oneDNN's effective CPU ISA (dnnl::get_effective_cpu_isa: the CPU's, capped by
/// ONEDNN_MAX_CPU_ISA) includes every instruction group of `want` (cpu_isa values are bit sets).
inline bool onednn_isa_has(dnnl::cpu_isa want) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto w = static_cast<unsigned>(want);
  return (isa & w) == w;
}

}  // namespace kernels::cpu
