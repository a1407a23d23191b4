// Run-folder and output-file numbering (official utils/general.py increment_path): the one place
// the engine numbers runs/train/exp, exp2, ... and detect's crop files x.jpg, x2.jpg, ...
#pragma once
#include <string>
#include <vector>

namespace io {

/// Official increment_path(path, exist_ok, sep='', mkdir): `path` itself when it does not exist
/// or `exist_ok`; otherwise the first free path{n} for n = 2, 3, ... (for an existing regular
/// file the number goes before the suffix: x.jpg -> x2.jpg). With `mkdir` the resulting folder is
/// created (with parents). Throws engine::IoError naming the folder when it cannot be created.
std::string increment_path(const std::string& path, bool exist_ok = false, bool mkdir = false);

/// One entry of a .txt list file (an image list of a data.yaml split, a detect --source list).
struct ListEntry {
  int line = 0;        ///< 1-based line in the list file
  std::string text;    ///< the entry as written (blanks stripped)
  std::string path;    ///< resolved, lexically normal
  bool exists = false; ///< `path` exists (false for glob patterns)
};

/// Reads a .txt list: one entry per line. A UTF-8 byte-order mark, blanks and tabs around an entry
/// and CR (Windows line ends) are stripped; blank lines are skipped. A relative entry ("x.jpg",
/// "./x.jpg", "../imgs/x.jpg") is resolved against the list file's own folder; when it does not
/// exist there but does exist relative to the working directory (the official rule), that path
/// is taken. Deviation: the official code resolves only "./" entries against the list's folder,
/// so a list of bare relative names written next to its images loses them all
/// (ultralytics/yolov5#6351). Throws engine::IoError naming the list when it cannot be read.
std::vector<ListEntry> read_list_file(const std::string& list_path);

}  // namespace io
