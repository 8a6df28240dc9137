// Whole-file reads and atomic writes with POSIX calls, errors naming the file and errno.
#include "support/Files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

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

/// Writes all of `bytes` (retrying short writes and EINTR); false with errno set on an error.
bool writeAll(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

/// A device, FIFO or socket written where it is (no temporary file, no fsync: neither applies);
/// /dev/full fails here with ENOSPC, and the close's result counts too.
Status writeInPlace(const std::string &path, std::span<const std::span<const uint8_t>> pieces) {
  Fd f;
  f.fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (f.fd < 0)
    return Status::error("cannot open '" + path + "' for writing: " + errnoText());
  for (std::span<const uint8_t> piece : pieces)
    if (!writeAll(f.fd, piece))
      return Status::error("cannot write '" + path + "': " + errnoText());
  if (::close(std::exchange(f.fd, -1)) != 0)
    return Status::error("cannot close '" + path + "': " + errnoText());
  return Status::ok();
}

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
  // What `path` names decides how it is written. A symlink is followed: the file it points at is
  // replaced and the link stays. A device, FIFO or socket is written in place: a temporary file
  // renamed over it would replace the node (as root, /dev/full by a regular file: "wrote" and the
  // bytes gone) and never reach what it stands for.
  std::string target = path;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return Status::error("cannot write '" + path + "': it is a directory");
    if (!S_ISREG(st.st_mode))
      return writeInPlace(path, pieces);
    struct stat link;
    if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      char *real = ::realpath(path.c_str(), nullptr);
      if (!real)
        return Status::error("cannot resolve '" + path + "': " + errnoText());
      target = real;
      std::free(real);
    }
  }
  // Errors name the file asked for, and the temporary file (or the link's target) it went to.
  std::string tmp = target + tmpSuffix;
  auto failed = [&](const std::string &what) {
    Status s =
        Status::error("cannot " + what + " '" + path + "' (writing '" + tmp + "'): " + errnoText());
    ::unlink(tmp.c_str());
    return s;
  };
  {
    Fd f;
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f.fd < 0)
      return Status::error("cannot create '" + tmp + "' (to write '" + path + "'): " + errnoText());
    for (std::span<const uint8_t> piece : pieces)
      if (!writeAll(f.fd, piece))
        return failed("write");
    if (::fsync(f.fd) != 0)
      return failed("fsync");
    if (::close(std::exchange(f.fd, -1)) != 0)
      return failed("close");
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    Status s = Status::error("cannot rename '" + tmp + "' to '" + target + "': " + errnoText());
    ::unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable.
  size_t slash = target.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : target.substr(0, slash));
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd >= 0)
    ::fsync(d.fd);
  return Status::ok();
}

} // namespace megac
