// data.yaml parsing and image-list resolution (official check_dataset / LoadImagesAndLabels).
#include "io/data_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "io/paths.h"

namespace fs = std::filesystem;

namespace io {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_entries(const YAML::Node& node, const std::string& key, const std::string& file) {
  std::vector<std::string> out;
  if (!node || node.IsNull()) return out;
  if (node.IsScalar()) {
    out.push_back(node.as<std::string>());
  } else if (node.IsSequence()) {
    for (const auto& e : node) {
      Y9_CHECK_T(engine::ConfigError, e.IsScalar(), file, ": '", key, "' list entries must be strings");
      out.push_back(e.as<std::string>());
    }
  } else {
    Y9_THROW(engine::ConfigError, file, ": '", key, "' must be a path or a list of paths");
  }
  return out;
}

std::string resolve_entry(const std::string& root, const std::string& entry) {
  fs::path p(entry);
  fs::path full = p.is_absolute() ? p : fs::path(root) / p;
  full = full.lexically_normal();
  std::error_code ec;  // the non-throwing forms: a name too long for the OS is just "not there"
  if (!fs::exists(full, ec) && entry.rfind("../", 0) == 0) {  // official: retry without a leading ../
    fs::path retry = (fs::path(root) / entry.substr(3)).lexically_normal();
    if (fs::exists(retry, ec)) return retry.string();
  }
  return full.string();
}

}  // namespace

bool is_image_file(const std::string& path) {
  static const std::set<std::string> kFormats = {"bmp", "dng", "jpeg", "jpg", "mpo",
                                                 "png", "tif", "tiff", "webp", "pfm"};
  auto dot = path.rfind('.');
  auto slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return false;
  return kFormats.count(lower(path.substr(dot + 1))) > 0;
}

std::string image_to_label_path(const std::string& image_path) {
  std::string p = image_path;
  const std::string sa = "/images/", sb = "/labels/";
  auto pos = p.rfind(sa);
  if (pos != std::string::npos) p.replace(pos, sa.size(), sb);
  auto dot = p.rfind('.');
  auto slash = p.rfind('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) p = p.substr(0, dot);
  return p + ".txt";
}

namespace {
DataConfig parse_data_yaml_impl(const std::string& text, const std::string& yaml_path);
}  // namespace

DataConfig load_data_yaml(const std::string& yaml_path) {
  std::error_code ec;
  Y9_CHECK_T(engine::IoError, fs::is_regular_file(yaml_path, ec), "data.yaml not found: ", yaml_path);
  std::ifstream f(yaml_path, std::ios::binary);
  Y9_CHECK_T(engine::IoError, f.good(), yaml_path, ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_data_yaml(ss.str(), yaml_path);
}

DataConfig parse_data_yaml(const std::string& text, const std::string& yaml_path) {
  try {
    return parse_data_yaml_impl(text, yaml_path);
  } catch (const YAML::Exception& e) {
    // A value of the wrong type (nc: 2.5, names: [a, [b]], train: {x: 1}): name the file and the
    // position yaml-cpp reports.
    Y9_THROW(engine::ConfigError, yaml_path, ": line ", e.mark.line + 1, ", column ", e.mark.column + 1,
             ": value of the wrong type (", e.msg, "); expected: path/train/val/test strings or lists of strings, ",
             "nc an integer, names a list of strings or an {id: name} map");
  }
}

namespace {
DataConfig parse_data_yaml_impl(const std::string& text, const std::string& yaml_path) {
  YAML::Node y;
  try {
    y = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    Y9_THROW(engine::IoError, yaml_path, ": not valid YAML: ", e.what());
  }
  Y9_CHECK_T(engine::ConfigError, y.IsMap(), yaml_path, ": top level must be a mapping");
  DataConfig cfg;
  cfg.yaml_path = fs::absolute(yaml_path).lexically_normal().string();
  cfg.yaml_dir = fs::path(cfg.yaml_path).parent_path().string();
  std::string path_key = (y["path"] && y["path"].IsScalar()) ? y["path"].as<std::string>() : "";
  fs::path root = path_key.empty() ? fs::path(cfg.yaml_dir) : fs::path(path_key);
  if (root.is_relative()) root = fs::path(cfg.yaml_dir) / root;
  cfg.root = root.lexically_normal().string();
  if (!cfg.root.empty() && cfg.root.size() > 1 && cfg.root.back() == '/') cfg.root.pop_back();

  for (const char* k : {"train", "val"})
    Y9_CHECK_T(engine::ConfigError, y[k] && !y[k].IsNull(), yaml_path, ": missing required key '", k, "'");
  for (auto& [key, dst] : std::vector<std::pair<const char*, std::vector<std::string>*>>{
           {"train", &cfg.train}, {"val", &cfg.val}, {"test", &cfg.test}})
    for (const auto& e : split_entries(y[key], key, yaml_path)) dst->push_back(resolve_entry(cfg.root, e));
  // `train: []` names no images at all: the same as a missing key.
  Y9_CHECK_T(engine::ConfigError, !cfg.train.empty(), yaml_path, ": 'train' is an empty list; it must name images");
  Y9_CHECK_T(engine::ConfigError, !cfg.val.empty(), yaml_path, ": 'val' is an empty list; it must name images");

  const YAML::Node names = y["names"];
  Y9_CHECK_T(engine::ConfigError, names && !names.IsNull(), yaml_path, ": missing required key 'names'");
  if (names.IsSequence()) {
    for (const auto& n : names) cfg.names.push_back(n.as<std::string>());
  } else if (names.IsMap()) {
    std::map<long, std::string> m;
    for (const auto& kv : names) {
      long id;
      try {
        id = kv.first.as<long>();
      } catch (const YAML::Exception&) {
        Y9_THROW(engine::ConfigError, yaml_path, ": 'names' keys must be integers, got '",
                 kv.first.as<std::string>(), "'");
      }
      m[id] = kv.second.as<std::string>();
    }
    long expect = 0;
    for (const auto& [id, name] : m) {
      Y9_CHECK_T(engine::ConfigError, id == expect, yaml_path, ": 'names' keys must be 0..", m.size() - 1,
                 " without gaps; missing id ", expect);
      cfg.names.push_back(name);
      ++expect;
    }
  } else {
    Y9_THROW(engine::ConfigError, yaml_path, ": 'names' must be a list or an {id: name} mapping");
  }
  Y9_CHECK_T(engine::ConfigError, !cfg.names.empty(), yaml_path, ": 'names' is empty");
  cfg.nc = static_cast<int>(cfg.names.size());
  if (y["nc"] && !y["nc"].IsNull()) {
    int nc = y["nc"].as<int>();
    Y9_CHECK_T(engine::ConfigError, nc == cfg.nc, yaml_path, ": nc=", nc, " but 'names' has ", cfg.nc,
               " entries");
  }
  return cfg;
}
}  // namespace

std::vector<std::string> resolve_image_files(const std::vector<std::string>& entries, std::vector<ListEntry>* missing) {
  std::vector<std::string> files;
  std::ostringstream searched;
  for (const auto& e : entries) {
    searched << " " << e;
    fs::path p(e);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& de : fs::recursive_directory_iterator(p, fs::directory_options::follow_directory_symlink))
        if (de.is_regular_file()) files.push_back(de.path().lexically_normal().string());
    } else if (fs::is_regular_file(p, ec)) {
      for (ListEntry& le : read_list_file(e)) {
        if (!le.exists) {
          if (is_image_file(le.text) && missing) {
            le.text = e;  // the list file, for the finding
            missing->push_back(std::move(le));
          }
          continue;
        }
        files.push_back(le.path);
      }
    } else {
      Y9_THROW(engine::IoError, "dataset path does not exist: ", e);
    }
  }
  std::vector<std::string> out;
  for (auto& f : files)
    if (is_image_file(f)) out.push_back(f);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  Y9_CHECK_T(engine::IoError, !out.empty(), "no images found; searched:", searched.str(),
             missing && !missing->empty() ? " (every listed image is missing)" : "");
  return out;
}

}  // namespace io
