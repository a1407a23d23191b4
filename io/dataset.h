// YOLO-format dataset scan: image list -> label files -> validated labels, with a label cache
// beside the labels. Matches LoadImagesAndLabels.__init__/cache_labels and verify_image_label
// (utils/dataloaders.py, WongKinYiu/yolov9 5b1ea9a; shared/spec/data.md section 2).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "io/labels.h"

namespace io {

/// One usable image with its validated labels.
struct ImageRecord {
  std::string image_path;
  std::string label_path;
  int width = 0, height = 0;                       ///< pixels after EXIF orientation
  std::vector<std::array<float, 5>> labels;        ///< rows [class, cx, cy, w, h], normalised to [0,1]
  std::vector<int> label_lines;                    ///< 1-based source line of each row
  std::vector<std::vector<float>> segments;        ///< polygons [x0,y0,x1,y1,...] normalised (polygon files only)
};

/// Counts per split. found+missing+empty+corrupt = images listed.
struct SplitStats {
  int64_t found = 0;                ///< label file present with rows
  int64_t missing = 0;              ///< no label file (background)
  int64_t empty = 0;                ///< empty label file (background)
  int64_t corrupt = 0;              ///< image dropped
  int64_t duplicates_removed = 0;   ///< duplicate label rows removed (all files)
  int64_t images = 0;               ///< usable images after filtering
  int64_t backgrounds = 0;          ///< usable images without labels
  int64_t boxes = 0;                ///< label rows over usable images
};

struct ScanOptions {
  int nc = 0;               ///< number of classes; > 0 checks class ids (out of range -> "refuse")
  int min_items = 0;        ///< > 0: drop images with fewer labels (--min-items)
  bool single_cls = false;  ///< set every class to 0 (--single-cls)
  /// Images with a side shorter than this are dropped as corrupt (the official rule is 10 px).
  /// Validation scans pass 0: letterbox handles any size, and no validation image is lost.
  int min_image_px = 10;
  bool use_cache = true;    ///< read/write the label cache (false: scan in memory only)
  int threads = 0;          ///< scan threads; 0 = hardware concurrency
  std::string prefix;       ///< log prefix for the summary line, e.g. "train: "
};

struct ScanResult {
  std::vector<std::string> sources;   ///< entries searched
  std::vector<ImageRecord> records;   ///< usable images, sorted by image path
  SplitStats stats;
  std::vector<Finding> findings;      ///< each rejected/corrected file once
  std::string cache_path;
  std::string hash;                   ///< label-cache hash: paths, sizes and mtimes of every image and label file
  bool cache_loaded = false;          ///< results came from a valid cache
  std::string cache_note;             ///< why the cache was rebuilt or not written (empty if fine)
  bool class_out_of_range = false;

  /// Official-style summary: "<prefix>Scanning <where>... F found, M missing, E empty, C corrupt".
  std::string summary_line() const;
  /// True when training may start (>=1 label file found, >=1 box, classes < nc); else sets `why`
  /// (for class ids: the first offending file, line and reason, and how many more).
  bool trainable(std::string* why = nullptr) const;
  /// One line per finding, "<prefix>WARNING <file>[:<line>]: <reason> (<action>)", then the
  /// cache note if any ("<prefix>WARNING <note>"), each ending in a newline (official scan warnings).
  std::string findings_text(const std::string& prefix) const;
};

/// Scans a split. `entries` are directories or .txt lists (see resolve_image_files). Images
/// without a label file are backgrounds. Cache: `<list>.cache` beside a .txt entry, else
/// `<label dir of the first image>.cache`; reused only if its version and hash (sizes, mtimes and
/// paths of every image and label file) match, otherwise rebuilt; unwritable -> note, in memory.
/// Throws engine::IoError when no image is found or none is usable (message names the paths).
/// Deterministic: records and findings are sorted by path whatever the thread count.
ScanResult scan_dataset(const std::vector<std::string>& entries, const ScanOptions& opts);

/// Cache file location for a split (official rule above).
std::string label_cache_path(const std::vector<std::string>& entries, const std::vector<std::string>& images);

}  // namespace io
