// YOLO label files: one row "class cx cy w h" (normalised) per object, or polygon rows "class x0
// y0 x1 y1 ..." converted to boxes. Matches the label part of verify_image_label
// (utils/dataloaders.py, WongKinYiu/yolov9 5b1ea9a; shared/spec/data.md section 2), except that a
// UTF-8 byte-order mark is accepted (the official code drops such a file as corrupt).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace io {

/// One rejected or corrected file. `line` is 1-based, 0 when the finding concerns the whole file.
struct Finding {
  std::string file;    ///< absolute path of the image, label or list file
  int line = 0;
  std::string reason;
  std::string action;  ///< "dropped" (image excluded), "rows removed", "converted", "refuse" (training refused)
};

/// A parsed label file.
struct LabelFile {
  enum class Status { Found, Empty, Corrupt };
  Status status = Status::Corrupt;
  std::vector<std::array<float, 5>> labels;  ///< [class, cx, cy, w, h], unique rows (official np.unique order)
  std::vector<int> lines;                    ///< 1-based source line of each row
  std::vector<std::vector<float>> segments;  ///< polygons [x0,y0,x1,y1,...] (polygon files only)
  std::vector<Finding> findings;             ///< conversions, removed duplicates, the reason for Corrupt
  int64_t dups = 0;                          ///< duplicate rows removed
};

/// Parses the text of a label file; `label_path` names it in findings. Blank lines are skipped;
/// values are separated by any whitespace (CR of Windows line ends included); a leading UTF-8 BOM
/// is ignored. Corrupt (with a finding naming the line) on a non-numeric or non-finite value, a
/// box row without exactly 5 values, a polygon row with an odd number of coordinates, a negative
/// value or a coordinate > 1. Empty when no row has values. Never throws.
LabelFile parse_labels(const std::string& text, const std::string& label_path);

}  // namespace io
