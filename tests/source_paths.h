// Where a test finds the project's files and the yolov9 program: in the source and build trees it
// was built from, or, in the GPU device kit (tests/gpu/kit.sh), beside the test binary (bin/yolov9,
// configs/ next to bin/). Needs Y9_SOURCE_DIR (defined for every test executable).
#pragma once
#include <filesystem>
#include <string>

namespace testutil {

/// The folder of the running executable (/proc/self/exe), "." when it cannot be read.
inline std::filesystem::path own_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path(".") : exe.parent_path();
}

/// A file of the source tree, `rel` relative to the project root ("configs/models/yolov9-t.yaml"):
/// under Y9_SOURCE_DIR when it exists there, else under the folder above the running test's own
/// (the kit's bin/<test> beside configs/), else under the test's own folder. Returns the first
/// existing candidate, or the Y9_SOURCE_DIR path when none exists (the caller's error names it).
inline std::string source_file(const std::string& rel) {
  namespace fs = std::filesystem;
  const fs::path first = fs::path(Y9_SOURCE_DIR) / rel;
  for (const fs::path& c : {first, own_dir() / ".." / rel, own_dir() / rel}) {
    std::error_code ec;
    if (fs::exists(c, ec)) return c.lexically_normal().string();
  }
  return first.string();
}

/// The yolov9 program: `binary_dir`/yolov9 (the build folder) when it exists, else the yolov9 beside
/// the running test (the kit's bin/). Returns the first existing candidate, or the first one.
inline std::string program_path(const std::string& binary_dir) {
  namespace fs = std::filesystem;
  const fs::path first = fs::path(binary_dir) / "yolov9";
  std::error_code ec;
  if (fs::exists(first, ec)) return first.string();
  const fs::path beside = own_dir() / "yolov9";
  return fs::exists(beside, ec) ? beside.string() : first.string();
}

}  // namespace testutil
