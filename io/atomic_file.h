// Atomic file replacement: write `<path>.tmp.<pid>`, flush it to the disk, rename it over `path`.
// A crash, kill -9 or full disk at any point leaves either the old or the new file, never a torn
// one; errors carry the system's reason ("No space left on device").
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace io {

/// One atomic replacement of `path`. The constructor creates `<path>.tmp.<pid>`; write() appends
/// bytes; commit() flushes (fsync), closes and renames it over `path`. Destroying an uncommitted
/// AtomicFile removes the temporary, so `path` keeps its old contents.
/// Errors: engine::IoError naming `path`, the temporary and strerror(errno) (create, write, flush,
/// rename). Not copyable; one thread.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `n` bytes (loops over short writes and EINTR).
  void write(const void* data, size_t n);
  /// fsync + close + rename. After it the object holds nothing.
  void commit();

  const std::string& temp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const char* what, int err);
  std::string path_, tmp_;
  int fd_ = -1;
};

/// Replaces `path` with `text` atomically (AtomicFile). Errors: engine::IoError as AtomicFile.
void write_file_atomic(const std::string& path, const std::string& text);

/// Removes the temporaries `<name>.tmp.<pid>` that an AtomicFile left in `dir` when its process
/// died mid-write (kill -9, power loss): those whose <pid> is not a running process. Returns the
/// removed paths. Never throws (a file that cannot be removed is skipped; a missing `dir` is empty).
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace io
