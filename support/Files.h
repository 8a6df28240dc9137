// Whole-file reads and atomic writes (tmp, fsync, rename) for the runtime's file formats.
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace megac {

/// The bytes of `path`; `what` names the file's role in errors ("cannot open plan file ...").
StatusOr<std::vector<uint8_t>> readFileBytes(const std::string &path, const char *what);

/// Writes the concatenation of `pieces` to `path` + `tmpSuffix`, fsyncs it, renames it over
/// `path` and fsyncs the directory, so a crash leaves either the old file or the new one. Writers
/// that may race on one path give a suffix unique to them. A symlink is followed (its target is
/// replaced, the link stays); a device, FIFO or socket (/dev/full, /dev/stdout) is written in
/// place; a directory is refused. Every write, fsync and close is checked: an error names `path`
/// and the reason (strerror), and leaves no temporary file.
Status writeFileAtomically(const std::string &path,
                           std::span<const std::span<const uint8_t>> pieces,
                           const std::string &tmpSuffix = ".tmp");

} // namespace megac
