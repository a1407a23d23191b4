// Fuzz target: safetensors files (io::parse_safetensors). Any bytes: never crashes, never reads
// out of bounds, the only exceptions are engine::IoError naming the file; no tensor is larger
// than the input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "fuzz/fuzz_check.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const io::SafetensorsData d = io::parse_safetensors(reinterpret_cast<const char*>(data), size, "fuzz.safetensors");
    for (const auto& [name, t] : d.tensors) {
      Y9_FUZZ_CHECK(name != "__metadata__");
      Y9_FUZZ_CHECK(static_cast<size_t>(t.numel()) * engine::dtype_size(t.dtype()) <= size);
    }
  } catch (const engine::IoError& e) {
    Y9_FUZZ_CHECK(e.message().find("fuzz.safetensors") != std::string::npos);
  }
  return 0;
}
