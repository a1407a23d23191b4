// Dataset scan, label validation and the label cache (official verify_image_label/cache_labels).
#include "io/dataset.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

#include "engine/error.h"
#include "io/data_yaml.h"
#include "io/image.h"
#include "io/labels.h"

namespace fs = std::filesystem;

namespace io {

namespace {

constexpr const char* kCacheVersion = "y9-label-cache-2";  // 2: small images are cached as read  // official: 0.6 (NumPy pickle)

enum Status { kFound = 0, kMissing = 1, kEmpty = 2, kCorrupt = 3 };

struct Verified {
  Status status = kCorrupt;
  ImageRecord rec;
  std::vector<Finding> findings;
  int64_t dups = 0;
};

std::string fmt_num(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Official verify_image_label, one image. Never throws.
Verified verify_one(const std::string& image_path) {
  Verified v;
  v.rec.image_path = image_path;
  v.rec.label_path = image_to_label_path(image_path);
  auto corrupt = [&](const std::string& file, int line, const std::string& reason) {
    v.status = kCorrupt;
    v.findings.push_back({file, line, reason, "dropped"});
    return v;
  };
  ImageProbe probe = probe_image(image_path);
  if (!probe.ok) return corrupt(image_path, 0, probe.reason);
  v.rec.width = probe.width;
  v.rec.height = probe.height;

  std::error_code ec;
  if (!fs::is_regular_file(v.rec.label_path, ec)) {
    v.status = kMissing;
    return v;
  }
  std::ifstream f(v.rec.label_path, std::ios::binary);
  if (!f) return corrupt(v.rec.label_path, 0, "cannot read label file");
  std::stringstream ss;
  ss << f.rdbuf();
  LabelFile lf = parse_labels(ss.str(), v.rec.label_path);
  v.findings.insert(v.findings.end(), lf.findings.begin(), lf.findings.end());
  v.dups = lf.dups;
  if (lf.status == LabelFile::Status::Corrupt) {
    v.status = kCorrupt;
    return v;
  }
  if (lf.status == LabelFile::Status::Empty) {
    v.status = kEmpty;
    return v;
  }
  v.rec.labels = std::move(lf.labels);
  v.rec.label_lines = std::move(lf.lines);
  v.rec.segments = std::move(lf.segments);
  v.status = kFound;
  return v;
}

// FNV-1a 64 over the official hash inputs (total size of all files, label paths, image paths)
// plus every file's size and mtime, so an edit that keeps the byte count is still seen.
std::string files_hash(const std::vector<std::string>& labels, const std::vector<std::string>& images) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  uintmax_t total = 0;
  std::string stats;
  for (const auto* list : {&labels, &images})
    for (const auto& p : *list) {
      std::error_code ec;
      auto sz = fs::file_size(p, ec);
      if (ec) { stats += "-;"; continue; }
      total += sz;
      auto mt = fs::last_write_time(p, ec).time_since_epoch().count();
      stats += std::to_string(sz) + ":" + std::to_string(mt) + ";";
    }
  mix(std::to_string(total));
  for (const auto& p : labels) mix(p);
  for (const auto& p : images) mix(p);
  mix(stats);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

nlohmann::json to_json(const Verified& v) {
  nlohmann::json j;
  j["s"] = static_cast<int>(v.status);
  j["img"] = v.rec.image_path;
  j["w"] = v.rec.width;
  j["h"] = v.rec.height;
  j["lb"] = v.rec.labels;
  j["ln"] = v.rec.label_lines;
  j["seg"] = v.rec.segments;
  j["dups"] = v.dups;
  nlohmann::json fs_ = nlohmann::json::array();
  for (const auto& f : v.findings) fs_.push_back({f.file, f.line, f.reason, f.action});
  j["f"] = fs_;
  return j;
}

Verified from_json(const nlohmann::json& j) {
  Verified v;
  v.status = static_cast<Status>(j.at("s").get<int>());
  v.rec.image_path = j.at("img").get<std::string>();
  v.rec.label_path = image_to_label_path(v.rec.image_path);
  v.rec.width = j.at("w").get<int>();
  v.rec.height = j.at("h").get<int>();
  v.rec.labels = j.at("lb").get<std::vector<std::array<float, 5>>>();
  v.rec.label_lines = j.at("ln").get<std::vector<int>>();
  v.rec.segments = j.at("seg").get<std::vector<std::vector<float>>>();
  v.dups = j.at("dups").get<int64_t>();
  for (const auto& f : j.at("f"))
    v.findings.push_back({f.at(0).get<std::string>(), f.at(1).get<int>(), f.at(2).get<std::string>(),
                          f.at(3).get<std::string>()});
  return v;
}

bool load_cache(const std::string& path, const std::string& hash, size_t n, std::vector<Verified>& out,
                std::string& note) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    note.clear();  // first scan: nothing to report
    return false;
  }
  try {
    std::ifstream f(path, std::ios::binary);
    nlohmann::json j = nlohmann::json::parse(f);
    if (j.at("version").get<std::string>() != kCacheVersion) {
      note = "cache version differs, rebuilt";
      return false;
    }
    if (j.at("hash").get<std::string>() != hash) {
      note = "dataset changed since the cache was written, rebuilt";
      return false;
    }
    const auto& items = j.at("items");
    if (items.size() != n) {
      note = "cache size differs, rebuilt";
      return false;
    }
    out.clear();
    for (const auto& it : items) out.push_back(from_json(it));
    return true;
  } catch (const std::exception& e) {
    note = std::string("unreadable cache (") + e.what() + "), rebuilt";
    return false;
  }
}

void write_cache(const std::string& path, const std::string& hash, const std::vector<Verified>& items,
                 std::string& note) {
  nlohmann::json j;
  j["version"] = kCacheVersion;
  j["hash"] = hash;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& v : items) arr.push_back(to_json(v));
  j["items"] = std::move(arr);
  const std::string tmp = path + ".tmp" + std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) {
      note += (note.empty() ? "" : "; ") + std::string("cache directory not writeable, cache kept in memory: ") + path;
      return;
    }
    f << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (!f) {
      note += "; cache write failed: " + path;
      std::error_code ec;
      fs::remove(tmp, ec);
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // atomic: a crash never leaves a torn cache
  if (ec) {
    note += "; cache rename failed: " + path;
    fs::remove(tmp, ec);
  }
}

}  // namespace

std::string label_cache_path(const std::vector<std::string>& entries, const std::vector<std::string>& images) {
  std::error_code ec;
  if (!entries.empty() && fs::is_regular_file(entries.back(), ec))
    return (fs::path(entries.back()).replace_extension(".cache")).string();
  Y9_CHECK(!images.empty(), "label_cache_path: no images");
  return fs::path(image_to_label_path(images.front())).parent_path().string() + ".cache";
}

std::string ScanResult::summary_line() const {
  std::ostringstream os;
  os << "Scanning '" << cache_path << "' images and labels... " << stats.found << " found, " << stats.missing
     << " missing, " << stats.empty << " empty, " << stats.corrupt << " corrupt";
  return os.str();
}

bool ScanResult::trainable(std::string* why) const {
  std::string w;
  if (records.empty()) w = "no usable images";
  else if (stats.found == 0) w = "no labels found in " + cache_path + ", can not start training";
  else if (stats.boxes == 0) w = "all label files are empty, can not start training";
  else if (class_out_of_range) {
    w = "label class ids exceed nc";
    const Finding* first = nullptr;
    int64_t n = 0;
    for (const auto& f : findings)
      if (f.action == "refuse") {
        if (!first) first = &f;
        ++n;
      }
    if (first) w += ": " + first->file + (first->line ? ":" + std::to_string(first->line) : "") + ": " + first->reason;
    if (n > 1) w += " (and " + std::to_string(n - 1) + " more)";
  }
  if (why) *why = w;
  return w.empty();
}

namespace {
// A finding quotes bytes from the user's file: control bytes (a NUL above all, which would end a
// C string) are shown as \xNN so the text prints whole.
std::string printable(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

std::string ScanResult::findings_text(const std::string& prefix) const {
  std::string out;
  for (const auto& f : findings)
    out += prefix + "WARNING " + printable(f.file) + (f.line ? ":" + std::to_string(f.line) : "") + ": " +
           printable(f.reason) + " (" + f.action + ")\n";
  if (!cache_note.empty()) out += prefix + "WARNING " + printable(cache_note) + "\n";
  return out;
}

ScanResult scan_dataset(const std::vector<std::string>& entries, const ScanOptions& opts) {
  ScanResult res;
  res.sources = entries;
  std::vector<ListEntry> missing;
  std::vector<std::string> images = resolve_image_files(entries, &missing);
  for (const ListEntry& m : missing) {  // official: listed, then corrupt ("No such file")
    res.stats.corrupt++;
    res.findings.push_back({m.text, m.line, "listed image " + m.path + " does not exist", "dropped"});
  }
  std::vector<std::string> label_paths;
  label_paths.reserve(images.size());
  for (const auto& p : images) label_paths.push_back(image_to_label_path(p));
  res.cache_path = label_cache_path(entries, images);
  const std::string hash = files_hash(label_paths, images);
  res.hash = hash;

  std::vector<Verified> items;
  if (opts.use_cache) res.cache_loaded = load_cache(res.cache_path, hash, images.size(), items, res.cache_note);
  if (!res.cache_loaded) {
    items.assign(images.size(), Verified{});
    int nt = opts.threads > 0 ? opts.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    nt = std::min<int>(nt, static_cast<int>(images.size()));
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < nt; ++t)
      pool.emplace_back([&] {
        for (size_t i = next++; i < images.size(); i = next++) items[i] = verify_one(images[i]);
      });
    for (auto& th : pool) th.join();
    if (opts.use_cache) write_cache(res.cache_path, hash, items, res.cache_note);
  }

  for (auto& v : items) {
    if (v.status != kCorrupt && opts.min_image_px > 0 &&
        (v.rec.width < opts.min_image_px || v.rec.height < opts.min_image_px)) {
      v.status = kCorrupt;  // official: checked before the labels, the only finding of the image
      v.dups = 0;
      v.findings = {{v.rec.image_path, 0,
                     "image size " + std::to_string(v.rec.width) + "x" + std::to_string(v.rec.height) + " <" +
                         std::to_string(opts.min_image_px) + " pixels",
                     "dropped"}};
    }
    switch (v.status) {
      case kFound: res.stats.found++; break;
      case kMissing: res.stats.missing++; break;
      case kEmpty: res.stats.empty++; break;
      case kCorrupt: res.stats.corrupt++; break;
    }
    res.stats.duplicates_removed += v.dups;
    for (auto& f : v.findings) res.findings.push_back(f);
    if (v.status == kCorrupt) continue;
    ImageRecord& r = v.rec;
    // Post-load filtering (official order: min_items, then single_cls), then the nc check that
    // train.py asserts (`Label class {mlc} exceeds nc={nc}`).
    if (opts.min_items > 0 && static_cast<int>(r.labels.size()) < opts.min_items) continue;
    if (opts.single_cls)
      for (auto& l : r.labels) l[0] = 0.0f;
    if (opts.nc > 0)
      for (size_t i = 0; i < r.labels.size(); ++i)
        if (r.labels[i][0] >= static_cast<float>(opts.nc) || r.labels[i][0] != std::floor(r.labels[i][0])) {
          res.class_out_of_range = true;
          res.findings.push_back({r.label_path, r.label_lines[i],
                                  "class id " + fmt_num(r.labels[i][0]) + " is not an integer in [0, " +
                                      std::to_string(opts.nc) + ")" ,
                                  "refuse"});
          break;  // one finding per file
        }
    res.records.push_back(std::move(r));
  }
  for (const auto& r : res.records) {
    res.stats.images++;
    if (r.labels.empty()) res.stats.backgrounds++;
    res.stats.boxes += static_cast<int64_t>(r.labels.size());
  }
  if (res.records.empty()) {
    std::ostringstream os;
    for (const auto& e : entries) os << " " << e;
    Y9_THROW(engine::IoError, opts.prefix, "no usable images (", images.size(), " listed, ", res.stats.corrupt,
             " corrupt", opts.min_items > 0 ? ", after --min-items" : "", "); searched:", os.str());
  }
  return res;
}

}  // namespace io
