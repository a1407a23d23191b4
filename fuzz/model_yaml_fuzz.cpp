// Fuzz target: model YAML (graph::parse_model_config). Any text: never crashes (no SIGFPE, no
// overflow), the only exceptions are engine::Error naming the source; an accepted config has
// layers whose channels are within graph::kMaxChannels and a detection head last.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "fuzz/fuzz_check.h"
#include "graph/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (int64_t nc_override : {int64_t{-1}, int64_t{7}}) {
    try {
      const graph::ModelConfig c = graph::parse_model_config(text, "fuzz.yaml", nc_override);
      Y9_FUZZ_CHECK(!c.layers.empty() && graph::head_branches(c.layers.back().type) > 0);
      Y9_FUZZ_CHECK(c.nc >= 1 && c.nc <= graph::kMaxClasses);
      for (size_t i = 0; i + 1 < c.layers.size(); ++i)
        for (int64_t ch : c.layers[i].c_out) Y9_FUZZ_CHECK(ch >= 1 && ch <= graph::kMaxChannels);
      for (const auto& L : c.layers) Y9_FUZZ_CHECK(L.n >= 1 && L.from.size() == L.from_abs.size());
    } catch (const engine::Error& e) {
      Y9_FUZZ_CHECK(e.message().find("fuzz.yaml") != std::string::npos);
    }
  }
  return 0;
}
