// data.yaml parsing (dataset description) and image-list resolution.
// Matches utils/general.py check_dataset and utils/dataloaders.py LoadImagesAndLabels.__init__
// (WongKinYiu/yolov9 5b1ea9a) except that a relative `path` is resolved against the YAML file's
// folder (the official code uses the repository root); see shared/spec/data.md section 1.
#pragma once

#include <string>
#include <vector>

#include "io/paths.h"

namespace io {

/// Parsed data.yaml. Paths are absolute and lexically normalised.
struct DataConfig {
  std::string yaml_path;                  ///< absolute path of the YAML file
  std::string yaml_dir;                   ///< its folder (findings are reported relative to it)
  std::string root;                       ///< resolved `path` key (yaml_dir when absent)
  std::vector<std::string> train, val, test;  ///< resolved entries: directories or .txt lists
  std::vector<std::string> names;         ///< class names, index = class id
  int nc = 0;                             ///< = names.size()
};

/// Reads a data.yaml. `names` may be a list or an {int: name} map (keys must be 0..n-1 integers);
/// `nc`, when present, must equal the number of names. `train`/`val`/`test` are a string or a list
/// of strings, joined to `path`; an entry starting with "../" that does not exist is retried
/// without it (official quirk). Throws engine::ConfigError (bad keys/values, naming the file) or
/// engine::IoError (file missing or not YAML).
DataConfig load_data_yaml(const std::string& yaml_path);

/// load_data_yaml on YAML text, as if it were the file `yaml_path` (relative paths resolve
/// against its folder; the file need not exist). Never crashes on any text (fuzzed in CI:
/// fuzz/data_yaml_fuzz.cpp). Throws engine::ConfigError or engine::IoError as load_data_yaml.
DataConfig parse_data_yaml(const std::string& text, const std::string& yaml_path);

/// Image files of a split: each entry is a directory (searched recursively) or a .txt list
/// (io::read_list_file: one path per line, relative paths against the list's folder, blanks, CR
/// and a BOM stripped, blank lines skipped). Keeps only accepted image extensions (bmp dng jpeg
/// jpg mpo png tif tiff webp pfm, case-insensitive), sorted, unique, as absolute paths for list
/// entries. A listed image that does not exist is skipped and, when `missing` is given, appended
/// to it (ListEntry::text = the list file, line = its line there).
/// Throws engine::IoError naming every path searched when an entry is missing or nothing is found.
std::vector<std::string> resolve_image_files(const std::vector<std::string>& entries,
                                             std::vector<ListEntry>* missing = nullptr);

/// True when the extension (after the last dot, lower-cased) is an accepted image format.
bool is_image_file(const std::string& path);

/// Official image->label rule (img2label_paths): the last "/images/" component becomes
/// "/labels/" and the extension becomes ".txt".
std::string image_to_label_path(const std::string& image_path);

}  // namespace io
