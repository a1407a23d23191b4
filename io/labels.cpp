// YOLO label-file parsing (io/labels.h): official verify_image_label, label part.
#include "io/labels.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>

namespace io {

namespace {
std::string fmt_num(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

LabelFile parse_labels(const std::string& text, const std::string& label_path) {
  LabelFile v;
  auto corrupt = [&](int line, const std::string& reason) {
    v.status = LabelFile::Status::Corrupt;
    v.findings.push_back({label_path, line, reason, "dropped"});
    return v;
  };
  // A UTF-8 byte-order mark (Windows editors write one) is not part of the first value.
  // Deviation: the official float() fails on it and drops the image as corrupt.
  const bool bom = text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0;
  std::istringstream f(bom ? text.substr(3) : text);
  std::vector<std::vector<float>> rows;
  std::vector<int> lines;
  std::string line;
  int ln = 0;
  while (std::getline(f, line)) {
    ++ln;
    std::istringstream is(line);
    std::vector<float> vals;
    std::string tok;
    while (is >> tok) {
      char* end = nullptr;
      errno = 0;
      float x = std::strtof(tok.c_str(), &end);
      if (end == tok.c_str() || *end != '\0' || !std::isfinite(x))
        return corrupt(ln, "non-numeric value '" + tok + "'");
      vals.push_back(x);
    }
    if (vals.empty()) continue;
    rows.push_back(std::move(vals));
    lines.push_back(ln);
  }
  if (rows.empty()) {
    v.status = LabelFile::Status::Empty;
    return v;
  }
  const bool polygons = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.size() > 6; });
  std::vector<std::array<float, 5>> lb;
  std::vector<std::vector<float>> segs;
  if (polygons) {
    // segments2boxes: class = first value, box = min/max of the (x, y) points, no clipping.
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.size() < 3 || (r.size() - 1) % 2 != 0)
        return corrupt(lines[i],
                       "polygon row needs an even number (>= 2) of coordinates, got " + std::to_string(r.size() - 1));
      float x0 = r[1], x1 = r[1], y0 = r[2], y1 = r[2];
      for (size_t k = 1; k + 1 < r.size(); k += 2) {
        x0 = std::min(x0, r[k]); x1 = std::max(x1, r[k]);
        y0 = std::min(y0, r[k + 1]); y1 = std::max(y1, r[k + 1]);
      }
      lb.push_back({r[0], (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0});
      segs.emplace_back(r.begin() + 1, r.end());
    }
    v.findings.push_back({label_path, 0,
                          "polygon (segment) rows converted to boxes (" + std::to_string(rows.size()) + " rows)",
                          "converted"});
  } else {
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.size() != 5)
        return corrupt(lines[i],
                       "labels require 5 columns, " + std::to_string(r.size()) + " columns detected");
      lb.push_back({r[0], r[1], r[2], r[3], r[4]});
    }
  }
  for (size_t i = 0; i < lb.size(); ++i) {
    for (int c = 0; c < 5; ++c)
      if (lb[i][c] < 0)
        return corrupt(lines[i],
                       std::string(c == 0 ? "negative class id " : c >= 3 ? "negative box size " : "negative coordinate ") +
                           fmt_num(lb[i][c]));
    for (int c = 1; c < 5; ++c)
      if (lb[i][c] > 1)
        return corrupt(lines[i],
                       "non-normalized or out of bounds coordinate " + fmt_num(lb[i][c]) + " > 1");
  }
  // np.unique(axis=0, return_index=True): unique rows in lexicographic order, first occurrence.
  std::vector<size_t> idx(lb.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return lb[a] < lb[b]; });
  std::vector<size_t> keep;
  for (size_t k = 0; k < idx.size(); ++k)
    if (k == 0 || lb[idx[k]] != lb[idx[k - 1]]) keep.push_back(idx[k]);
  if (keep.size() < lb.size()) {
    v.dups = static_cast<int64_t>(lb.size() - keep.size());
    int first_dup_line = 0;
    for (size_t k = 1; k < idx.size(); ++k)
      if (lb[idx[k]] == lb[idx[k - 1]]) {
        int l = lines[std::max(idx[k], idx[k - 1])];
        first_dup_line = first_dup_line == 0 ? l : std::min(first_dup_line, l);
      }
    v.findings.push_back({label_path, first_dup_line,
                          std::to_string(v.dups) + " duplicate label rows removed", "rows removed"});
    std::vector<std::array<float, 5>> lb2;
    std::vector<std::vector<float>> segs2;
    std::vector<int> lines2;
    for (size_t k : keep) {
      lb2.push_back(lb[k]);
      lines2.push_back(lines[k]);
      if (polygons) segs2.push_back(segs[k]);
    }
    lb.swap(lb2);
    segs.swap(segs2);
    lines.swap(lines2);
  }
  v.labels = std::move(lb);
  v.lines = std::move(lines);
  v.segments = std::move(segs);
  v.status = LabelFile::Status::Found;
  return v;
}

}  // namespace io
