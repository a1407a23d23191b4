// Detect's source listing (official LoadImages) and class colours: the parts of the detect loop
// that need no image library, shared by detector.cpp (OpenCV) and detect_nocv.cpp (no OpenCV).
#include <glob.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>

#include "apps/training/detector.h"
#include "engine/error.h"
#include "io/paths.h"

namespace fs = std::filesystem;

namespace training {

namespace {

const std::vector<std::string> kImgFormats = {"bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm"};
const std::vector<std::string> kVidFormats = {"asf", "avi", "gif", "m4v", "mkv", "mov", "mp4", "mpeg", "mpg", "ts", "wmv"};

std::string lower_ext(const std::string& p) {
  std::string e = fs::path(p).extension().string();
  if (!e.empty() && e[0] == '.') e = e.substr(1);
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

bool in(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::vector<std::string> glob_sorted(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<SourceFile> list_sources(const std::string& source, std::vector<std::string>* skipped) {
  std::vector<std::string> files;
  auto add_entry = [&](const std::string& e) {
    if (e.find('*') != std::string::npos) {
      auto g = glob_sorted(e);
      files.insert(files.end(), g.begin(), g.end());
    } else if (fs::is_directory(e)) {
      auto g = glob_sorted((fs::path(e) / "*.*").string());
      files.insert(files.end(), g.begin(), g.end());
    } else {
      files.push_back(e);
    }
  };
  if (lower_ext(source) == "txt" && fs::is_regular_file(source)) {
    // One entry per line, relative to the list's folder (io::read_list_file). Deviation: the
    // official LoadImages splits the file on whitespace, resolves against the working directory
    // and stops at the first missing entry; we skip it with a warning naming the list and line.
    for (const io::ListEntry& le : io::read_list_file(source)) {
      if (le.exists || le.text.find('*') != std::string::npos) {
        add_entry(le.path);
        continue;
      }
      const std::string msg = source + ":" + std::to_string(le.line) + ": " + le.text + " does not exist (" + le.path +
                              "); skipped";
      if (skipped) skipped->push_back(msg);
      else std::fprintf(stderr, "detect: WARNING %s\n", msg.c_str());
    }
  } else {
    Y9_CHECK_T(engine::IoError, source.find('*') != std::string::npos || fs::exists(source), "--source ", source,
               " does not exist");
    add_entry(source);
  }
  std::vector<SourceFile> out;
  for (const auto& f : files) {
    const std::string e = lower_ext(f);
    std::error_code ec;
    fs::path abs = fs::weakly_canonical(fs::absolute(f), ec);
    const std::string p = ec ? f : abs.string();
    if (in(kImgFormats, e)) out.push_back({p, false});
  }
  for (const auto& f : files) {
    const std::string e = lower_ext(f);
    std::error_code ec;
    fs::path abs = fs::weakly_canonical(fs::absolute(f), ec);
    if (in(kVidFormats, e)) out.push_back({ec ? f : abs.string(), true});
  }
  Y9_CHECK_T(engine::IoError, !out.empty(), "No images or videos found in ", source,
             ". Supported formats are:\nimages: ", join(kImgFormats), "\nvideos: ", join(kVidFormats));
  return out;
}

std::array<uint8_t, 3> class_color_bgr3(int64_t c) {
  static const uint32_t hex[20] = {0xFF3838, 0xFF9D97, 0xFF701F, 0xFFB21D, 0xCFD231, 0x48F90A, 0x92CC17,
                                   0x3DDB86, 0x1A9334, 0x00D4BB, 0x2C99A8, 0x00C2FF, 0x344593, 0x6473FF,
                                   0x0018EC, 0x8438FF, 0x520085, 0xCB38FF, 0xFF95C8, 0xFF37C7};
  const uint32_t h = hex[((c % 20) + 20) % 20];
  return {static_cast<uint8_t>(h & 0xFF), static_cast<uint8_t>((h >> 8) & 0xFF), static_cast<uint8_t>((h >> 16) & 0xFF)};
}

}  // namespace training
