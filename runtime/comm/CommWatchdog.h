// A deadline on communication that runs asynchronously (NCCL on non-blocking communicators):
// the caller polls the operation until it completes, fails, or the timeout passes, and on
// failure or expiry aborts it, so a peer that never makes the matching call ends in an error
// naming the rank, the operation and the group instead of a hang (as the MPI communicator's
// deadlines do, Communicator.h).
//
// The polling logic is here, apart from NCCL and CUDA, so that it is tested against a fake
// operation and clock (tests/unit/runtime/CommWatchdogTest.cpp); runtime/cuda/NcclCommunicator
// implements PendingOp over ncclCommGetAsyncError, cudaEventQuery and ncclCommAbort.
#pragma once

#include "support/Status.h"

#include <chrono>
#include <string>

namespace megac::runtime::comm {

/// One operation in flight.
class PendingOp {
public:
  enum class State { pending, done, failed };
  virtual ~PendingOp() = default;
  /// Where the operation stands; on `failed`, `why` says what went wrong.
  virtual State poll(std::string &why) = 0;
  /// Ends the operation (and what it runs on) for good; called once, after a failure or expiry.
  virtual void abort() = 0;
};

/// Time for the watchdog (a fake one in tests).
class WatchdogClock {
public:
  using Duration = std::chrono::steady_clock::duration;
  virtual ~WatchdogClock() = default;
  virtual std::chrono::steady_clock::time_point now() = 0;
  virtual void sleep(Duration d) = 0;
  /// The steady clock and real sleeps.
  static WatchdogClock &system();
};

struct WatchdogOptions {
  std::chrono::seconds timeout{300};
  /// Polls without pausing first (a GPU collective usually completes within microseconds),
  /// then pauses that double from 1 us up to maxPause.
  int spinPolls = 1000;
  std::chrono::microseconds maxPause{200};
};

/// Polls `op` until it is done (ok), failed (error: "<what> failed: <why>") or the timeout has
/// passed (error: "<what> did not complete within N s (a peer did not make the matching call)");
/// both errors abort `op` first and end with `abortedWhat` (" (the NCCL communicators were
/// aborted)"). `what` names the rank, the operation and the group.
Status waitWithDeadline(PendingOp &op, const std::string &what, const WatchdogOptions &options,
                        const std::string &abortedWhat = "",
                        WatchdogClock &clock = WatchdogClock::system());

} // namespace megac::runtime::comm
