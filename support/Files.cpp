// Whole-file reads and atomic writes with POSIX calls, errors naming the file and errno.
#include "support/Files.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace megac {

namespace {

std::string errnoText() { return std::strerror(errno); }

/// Closes a descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

StatusOr<std::vector<uint8_t>> readFileBytes(const std::string &path, const char *what) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0)
    return Status::error("cannot open " + std::string(what) + " '" + path + "': " + errnoText());
  struct stat st;
  if (::fstat(f.fd, &st) != 0)
    return Status::error("cannot stat " + std::string(what) + " '" + path + "': " + errnoText());
  if (S_ISDIR(st.st_mode))
    return Status::error(std::string(what) + " '" + path + "' is a directory");
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(f.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return Status::error("cannot read " + std::string(what) + " '" + path + "': " + errnoText());
    if (n == 0) // the file shrank while we read it
      break;
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

Status writeFileAtomically(const std::string &path,
                           std::span<const std::span<const uint8_t>> pieces,
                           const std::string &tmpSuffix) {
  std::string tmp = path + tmpSuffix;
  {
    Fd f;
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f.fd < 0)
      return Status::error("cannot create '" + tmp + "': " + errnoText());
    for (std::span<const uint8_t> piece : pieces) {
      size_t done = 0;
      while (done < piece.size()) {
        ssize_t n = ::write(f.fd, piece.data() + done, piece.size() - done);
        if (n < 0 && errno == EINTR)
          continue;
        if (n < 0) {
          Status s = Status::error("cannot write '" + tmp + "': " + errnoText());
          ::unlink(tmp.c_str());
          return s;
        }
        done += static_cast<size_t>(n);
      }
    }
    if (::fsync(f.fd) != 0) {
      Status s = Status::error("cannot fsync '" + tmp + "': " + errnoText());
      ::unlink(tmp.c_str());
      return s;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Status::error("cannot rename '" + tmp + "' to '" + path + "': " + errnoText());
    ::unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable.
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd >= 0)
    ::fsync(d.fd);
  return Status::ok();
}

} // namespace megac
