// increment_path (io/paths.h).
#include "io/paths.h"

#include <filesystem>
#include <system_error>

#include "engine/error.h"

namespace fs = std::filesystem;

namespace io {

std::string increment_path(const std::string& path_in, bool exist_ok, bool mkdir) {
  fs::path p(path_in);
  if (fs::exists(p) && !exist_ok) {
    const bool file = fs::is_regular_file(p);
    const fs::path stem = file ? p.parent_path() / p.stem() : p;
    const std::string suffix = file ? p.extension().string() : "";
    for (int n = 2;; ++n) {
      fs::path q = stem.string() + std::to_string(n) + suffix;
      if (!fs::exists(q)) {
        p = q;
        break;
      }
    }
  }
  if (mkdir) {
    std::error_code ec;
    fs::create_directories(p, ec);
    Y9_CHECK_T(engine::IoError, !ec && fs::is_directory(p), "cannot create run folder ", p.string(), ": ",
               ec.message());
  }
  return p.string();
}

}  // namespace io
