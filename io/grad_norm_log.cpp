// grad_norm.csv of a training run (io/grad_norm_log.h): append one row per optimizer step, read
// back, and truncate to a resume point.
#include "io/grad_norm_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/error.h"

namespace io {

namespace {

constexpr const char* kHeader = "epoch,iteration,x,grad_norm";

std::string format_row(const GradNormRow& r) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%lld,%lld,%.9g,%.9g\n", static_cast<long long>(r.epoch),
                static_cast<long long>(r.iteration), r.x, r.norm);
  return buf;
}

// Writes `text` to `path` with C stdio so that errno (ENOSPC, EACCES) reaches the message.
void write_all(const std::string& path, const std::string& text, const char* mode) {
  FILE* f = std::fopen(path.c_str(), mode);
  Y9_CHECK_T(engine::IoError, f != nullptr, "cannot write ", path, ": ", std::strerror(errno));
  const size_t n = std::fwrite(text.data(), 1, text.size(), f);
  int err = n == text.size() ? 0 : errno;
  if (std::fflush(f) != 0 && err == 0) err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  Y9_CHECK_T(engine::IoError, err == 0, "cannot write ", path, ": ", std::strerror(err));
}

}  // namespace

void append_grad_norm(const std::string& path, const GradNormRow& row) {
  std::error_code ec;
  const bool fresh = !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
  write_all(path, (fresh ? std::string(kHeader) + "\n" : std::string()) + format_row(row), "ab");
}

std::vector<GradNormRow> read_grad_norms(const std::string& path) {
  std::vector<GradNormRow> rows;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return rows;
  std::ifstream f(path);
  Y9_CHECK_T(engine::IoError, f.good(), "cannot read ", path, ": ", std::strerror(errno));
  std::string line;
  int64_t ln = 0;
  while (std::getline(f, line)) {
    ++ln;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (ln == 1) {
      Y9_CHECK_T(engine::IoError, line == kHeader, path, ": line 1 is '", line, "', expected the header '", kHeader,
                 "'");
      continue;
    }
    if (line.empty()) continue;
    GradNormRow r;
    long long e = 0, it = 0;
    char tail = 0;
    // strtod-style parsing accepts "inf" and "nan" (a diverging step is logged as it was).
    char xs[64] = {0}, ns[64] = {0};
    const int got = std::sscanf(line.c_str(), "%lld,%lld,%63[^,],%63s%c", &e, &it, xs, ns, &tail);
    char* end_x = nullptr;
    char* end_n = nullptr;
    r.x = std::strtod(xs, &end_x);
    r.norm = std::strtod(ns, &end_n);
    Y9_CHECK_T(engine::IoError, got == 4 && end_x != xs && *end_x == 0 && end_n != ns && *end_n == 0, path,
               ": line ", ln, " is not 'epoch,iteration,x,grad_norm': '", line, "'");
    r.epoch = e;
    r.iteration = it;
    rows.push_back(r);
  }
  return rows;
}

std::vector<GradNormRow> truncate_grad_norms(const std::string& path, int64_t first_dropped) {
  std::vector<GradNormRow> rows = read_grad_norms(path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return rows;
  std::vector<GradNormRow> kept;
  for (const auto& r : rows)
    if (r.iteration < first_dropped) kept.push_back(r);
  if (kept.size() == rows.size()) return kept;
  std::string text = std::string(kHeader) + "\n";
  for (const auto& r : kept) text += format_row(r);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    write_all(tmp, text, "wb");
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    Y9_THROW(engine::IoError, "cannot replace ", path, ": ", ec.message());
  }
  return kept;
}

}  // namespace io
