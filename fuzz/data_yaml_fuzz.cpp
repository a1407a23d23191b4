// Fuzz target: data.yaml (io::parse_data_yaml). Any text: never crashes; the only exceptions are
// engine::Error (ConfigError, IoError) with a message naming the file; an accepted file has
// names, nc = their count, and train and val entries.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "fuzz/fuzz_check.h"
#include "io/data_yaml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = "/nonexistent-y9-fuzz/sub/data.yaml";
  try {
    const io::DataConfig c = io::parse_data_yaml(text, path);
    Y9_FUZZ_CHECK(c.nc > 0 && static_cast<size_t>(c.nc) == c.names.size());
    Y9_FUZZ_CHECK(!c.train.empty() && !c.val.empty());
  } catch (const engine::Error& e) {
    Y9_FUZZ_CHECK(e.message().find(path) != std::string::npos);
  }
  return 0;
}
