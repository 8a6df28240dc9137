// Polling asynchronous communication against a deadline (CommWatchdog.h).
#include "runtime/comm/CommWatchdog.h"

#include <algorithm>
#include <thread>

namespace megac::runtime::comm {

namespace {

class SystemClock final : public WatchdogClock {
public:
  std::chrono::steady_clock::time_point now() override { return std::chrono::steady_clock::now(); }
  void sleep(Duration d) override { std::this_thread::sleep_for(d); }
};

} // namespace

WatchdogClock &WatchdogClock::system() {
  static SystemClock clock;
  return clock;
}

Status waitWithDeadline(PendingOp &op, const std::string &what, const WatchdogOptions &options,
                        const std::string &abortedWhat, WatchdogClock &clock) {
  auto deadline = clock.now() + options.timeout;
  std::chrono::microseconds pause(0);
  for (int polls = 0;; ++polls) {
    std::string why;
    switch (op.poll(why)) {
    case PendingOp::State::done:
      return Status::ok();
    case PendingOp::State::failed:
      op.abort();
      return Status::error(what + " failed: " + why + abortedWhat);
    case PendingOp::State::pending:
      break;
    }
    // The deadline is checked after a poll, so an operation that completes in time is never
    // aborted because the clock moved while it was polled.
    if (clock.now() >= deadline) {
      op.abort();
      return Status::error(what + " did not complete within " +
                           std::to_string(options.timeout.count()) +
                           " s (a peer did not make the matching call)" + abortedWhat);
    }
    if (polls >= options.spinPolls) {
      pause = std::min(options.maxPause, std::max(std::chrono::microseconds(1), pause * 2));
      clock.sleep(pause);
    }
  }
}

} // namespace megac::runtime::comm
