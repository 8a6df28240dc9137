// `megac train`'s stop and retention flags (ExitFlags.h).
#include "tools/megac/ExitFlags.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace megac::cli {

void ExitFlags::declare(Flags &f) {
  f.flag("--exit-signal-handler", onSignal).flag("--no-exit-signal-handler", noSignal);
  f.number(
      "--exit-duration-in-mins", durationMinutes, [](double v) { return v > 0; },
      "a number of minutes > 0");
  f.count("--keep-last", keepLast, 1).text("--keep-steps", keepSteps, "A,B,...");
}

std::string ExitFlags::configure(const Flags &f, driver::RunConfig &c) {
  if (onSignal && noSignal)
    return "give either --exit-signal-handler or --no-exit-signal-handler, not both";
  c.exec.exitOnSignal = onSignal || (c.checkpoint.saveDir && !noSignal);
  if (f.given("--exit-duration-in-mins"))
    c.exec.exitDurationMinutes = durationMinutes;
  if ((f.given("--keep-last") || keepSteps) && !c.checkpoint.saveDir)
    return "--keep-last and --keep-steps need --save DIR";
  if (keepSteps && !f.given("--keep-last"))
    return "--keep-steps applies with --keep-last N (without it every step is kept)";
  c.checkpoint.keepLast = keepLast;
  if (keepSteps) {
    std::string text = *keepSteps;
    for (size_t at = 0; at <= text.size();) {
      size_t comma = std::min(text.find(',', at), text.size());
      std::string item = text.substr(at, comma - at);
      char *end = nullptr;
      errno = 0;
      long long step = item.empty() ? -1 : std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end || errno || step < 1)
        return "--keep-steps: '" + item + "' is not a step number >= 1 (give A,B,...)";
      c.checkpoint.keepSteps.push_back(step);
      at = comma + 1;
    }
  }
  return {};
}

} // namespace megac::cli
