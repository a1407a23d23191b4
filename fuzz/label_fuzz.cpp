// Fuzz target: YOLO label files (io::parse_labels). Any bytes: never crashes, never throws, and
// an accepted file holds only finite, normalised rows with a source line each.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "io/labels.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const io::LabelFile f = io::parse_labels(text, "fuzz/labels/x.txt");
  if (f.status == io::LabelFile::Status::Corrupt) {
    Y9_FUZZ_CHECK(!f.findings.empty() && f.findings.back().action == "dropped");
    return 0;
  }
  Y9_FUZZ_CHECK(f.labels.size() == f.lines.size());
  Y9_FUZZ_CHECK(f.segments.empty() || f.segments.size() == f.labels.size());
  if (f.status == io::LabelFile::Status::Empty) Y9_FUZZ_CHECK(f.labels.empty());
  for (const auto& r : f.labels) {
    Y9_FUZZ_CHECK(std::isfinite(r[0]) && r[0] >= 0);
    for (int c = 1; c < 5; ++c) Y9_FUZZ_CHECK(std::isfinite(r[c]) && r[c] >= 0 && r[c] <= 1);
  }
  for (int ln : f.lines) Y9_FUZZ_CHECK(ln >= 1);
  return 0;
}
