// `megac train`'s flags for ending a long run well: stopping on a signal or a time limit
// (--exit-signal-handler, --no-exit-signal-handler, --exit-duration-in-mins) and checkpoint
// retention (--keep-last, --keep-steps), into the driver's RunConfig.
#pragma once

#include "tools/megac/Cli.h"

#include "driver/RunConfig.h"

#include <optional>
#include <string>

namespace megac::cli {

struct ExitFlags {
  bool onSignal = false, noSignal = false;
  double durationMinutes = 0;
  int64_t keepLast = 0;
  std::optional<std::string> keepSteps;

  void declare(Flags &flags);
  /// After flags.parse and the run's own configure: sets c.exec.exitOnSignal (default: on with
  /// --save), c.exec.exitDurationMinutes and the retention, or returns a one-line error.
  std::string configure(const Flags &flags, driver::RunConfig &c);
};

} // namespace megac::cli
