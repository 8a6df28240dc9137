// The checkpoint folder of one run (`megac train --save DIR`): a lock so that only one run saves
// into it, temporary names unique to this process, and retention (`--keep-last`, `--keep-steps`)
// with the clean-up of failed saves.
//
// DIR/save.lock holds {"host", "pid", "start_ticks", "since"} of the run saving there. A second
// run is refused with the holder's host and pid. A lock whose holder is gone (same host, and no
// process with that pid, a zombie, or one started at another time; a holder still alive gets
// 3 s to end, as a job killed and started again at once may overlap) is stale: the next run
// takes it over and says so. A holder on another host cannot be checked: the message says to remove
// the file once that run has ended.
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace megac::runtime::checkpoint {

/// "save.lock".
inline constexpr const char *kLockFile = "save.lock";

/// This process's mark for temporary names: ".tmp-<host>-<pid>" (two runs never collide on a
/// name, even when both save into one folder against the lock's advice).
std::string tempSuffix();

class SaveFolderLock {
public:
  /// Takes DIR/save.lock, creating DIR when missing. A stale lock is taken over; `tookOver`
  /// then gets one line naming the previous holder. Errors when a live run holds it.
  static StatusOr<std::unique_ptr<SaveFolderLock>> acquire(const std::string &dir,
                                                           std::string *tookOver = nullptr);
  /// Removes the lock file when it is still this process's.
  ~SaveFolderLock();
  SaveFolderLock(const SaveFolderLock &) = delete;
  SaveFolderLock &operator=(const SaveFolderLock &) = delete;

  const std::string &path() const { return path_; }

private:
  SaveFolderLock(std::string path, std::string content)
      : path_(std::move(path)), content_(std::move(content)) {}
  std::string path_, content_;
};

/// Which complete checkpoints a save folder keeps: the keepLast newest (0: all) and every step
/// in keepSteps.
struct Retention {
  int64_t keepLast = 0;
  std::vector<int64_t> keepSteps;
};

/// After a successful save (with the lock held): removes what failed saves left (step-N.tmp*,
/// latest.tmp* and meta.json temporaries) and the complete steps `retention` does not keep.
/// Returns the paths removed; an error names a path that could not be removed.
StatusOr<std::vector<std::string>> pruneSaveFolder(const std::string &dir,
                                                   const Retention &retention);

} // namespace megac::runtime::checkpoint
