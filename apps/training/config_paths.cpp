// Config file lookup for the yolov9 commands (see config_paths.h).
#include "apps/training/config_paths.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "engine/error.h"

namespace fs = std::filesystem;

namespace training {

namespace {
std::string exe_dir() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

}  // namespace

std::string resolve_config(const std::string& given, const std::string& sub, const char* what) {
  if (given.empty()) Y9_THROW(engine::ConfigError, what, " path is empty");
  if (fs::is_regular_file(given)) return fs::absolute(given).lexically_normal().string();
  std::vector<fs::path> roots = {fs::current_path() / "configs", fs::path(exe_dir()) / ".." / "configs",
                                 fs::path(exe_dir()) / "configs"};
  std::vector<std::string> names = {fs::path(given).filename().string()};
  if (fs::path(given).extension() != ".yaml") names.push_back(names[0] + ".yaml");
  std::string searched = given;
  for (const auto& r : roots)
    for (const auto& n : names) {
      fs::path c = r / sub / n;
      searched += ", " + c.lexically_normal().string();
      if (fs::is_regular_file(c)) return fs::absolute(c).lexically_normal().string();
    }
  std::string shipped;
  for (const auto& r : roots) {
    std::error_code ec;
    if (!fs::is_directory(r / sub, ec)) continue;
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(r / sub)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    for (const auto& s : v) shipped += (shipped.empty() ? "" : " ") + s;
    break;
  }
  Y9_THROW(engine::IoError, what, " '", given, "' not found (searched: ", searched, ")",
           shipped.empty() ? "" : "; shipped: " + shipped);
}

}  // namespace training
