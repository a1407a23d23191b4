// Atomic file replacement over POSIX open/write/fsync/rename (io/atomic_file.h).
#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/error.h"

namespace io {

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    Y9_THROW(engine::IoError, "cannot write '", path_, "': cannot create the temporary file '", tmp_,
             "': ", std::strerror(err));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::fail(const char* what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  Y9_THROW(engine::IoError, "cannot write '", path_, "': ", what, " the temporary file '", tmp_,
           "' failed: ", std::strerror(err));
}

void AtomicFile::write(const void* data, size_t n) {
  Y9_ASSERT(fd_ >= 0, "AtomicFile::write after commit or failure");
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("writing", errno);
    if (w == 0) fail("writing", EIO);
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  Y9_ASSERT(fd_ >= 0, "AtomicFile::commit twice or after a failure");
  // fsync: the rename must not reach the disk before the data (power loss); a filesystem that
  // cannot sync (EINVAL, EROFS) is accepted as it is.
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) fail("flushing", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    Y9_THROW(engine::IoError, "cannot write '", path_, "': closing the temporary file '", tmp_,
             "' failed: ", std::strerror(err));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    Y9_THROW(engine::IoError, "cannot write '", path_, "': cannot rename '", tmp_, "' to it: ", std::strerror(err));
  }
}

void write_file_atomic(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at == 0 || at + 5 >= name.size()) continue;
    const std::string pid_s = name.substr(at + 5);
    if (pid_s.size() > 9 || pid_s.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::stol(pid_s);
    if (pid == static_cast<long>(::getpid())) continue;
    if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;  // its writer lives
    std::error_code rec;
    if (fs::is_regular_file(it->path(), rec) && fs::remove(it->path(), rec)) removed.push_back(it->path().string());
  }
  return removed;
}

}  // namespace io
