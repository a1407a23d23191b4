// increment_path and .txt list files (io/paths.h).
#include "io/paths.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
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

std::vector<ListEntry> read_list_file(const std::string& list_path) {
  std::ifstream f(list_path, std::ios::binary);
  Y9_CHECK_T(engine::IoError, f.good(), "cannot read list file ", list_path, ": ", std::strerror(errno));
  const fs::path dir = fs::absolute(list_path).parent_path();
  std::vector<ListEntry> out;
  std::string line;
  for (int ln = 1; std::getline(f, line); ++ln) {
    if (ln == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    const size_t b = line.find_first_not_of(" \t\r\v\f");
    if (b == std::string::npos) continue;
    const size_t e = line.find_last_not_of(" \t\r\v\f");
    ListEntry le;
    le.line = ln;
    le.text = line.substr(b, e + 1 - b);
    const fs::path p(le.text);
    std::error_code ec;
    if (p.is_absolute()) {
      le.path = p.lexically_normal().string();
    } else {
      const fs::path here = (dir / p).lexically_normal();
      const fs::path cwd = fs::absolute(p, ec).lexically_normal();
      le.path = (!fs::exists(here, ec) && fs::exists(cwd, ec)) ? cwd.string() : here.string();
    }
    le.exists = fs::exists(le.path, ec);
    out.push_back(std::move(le));
  }
  return out;
}

}  // namespace io
