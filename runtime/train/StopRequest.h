// Stopping a training run cleanly (`megac train --exit-signal-handler`, `--exit-duration-in-mins`):
// a signal or the run's wall-time limit asks for a stop; at the next step boundary the ranks
// agree (an all-reduce of every rank's request, MAX, as Megatron's distributed signal handler
// does), save a checkpoint of the same step and exit.
//
// Signals: the handler only records the signal number (async-signal-safe); nothing is done in
// it. Under mpirun a rank handles SIGUSR1 and SIGUSR2, which Open MPI forwards untouched (it
// forwards SIGTERM too, but kills the ranks about a second later); run without mpirun it handles
// SIGTERM and SIGINT as well (once: a second one ends the process as usual).
#pragma once

#include "runtime/comm/Communicator.h"
#include "support/Status.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::runtime::train {

/// The signals a rank handles: SIGUSR1, SIGUSR2 and, without mpirun, SIGTERM and SIGINT.
std::vector<int> stopSignals(bool underMpirun);
/// Installs the recording handler for `signals` (process-wide; idempotent).
Status installStopSignalHandler(const std::vector<int> &signals);
/// The first handled signal received since the handler was installed (or the last
/// clearStopSignal), 0 when none.
int receivedStopSignal();
void clearStopSignal();
/// "SIGTERM", "SIGUSR2", else "signal N".
std::string signalName(int signal);

/// Why the ranks stop early.
struct StopDecision {
  int signal = 0;         // the largest signal number any rank received (0: none)
  bool timeLimit = false; // some rank's wall time passed the limit
  bool stop() const { return signal != 0 || timeLimit; }
  /// "signal SIGUSR2" / "the time limit of 30 minutes": for the line the run prints.
  std::string reason(std::optional<double> limitMinutes) const;
};

/// One rank's view: whether it was signalled (when it handles signals) and whether its wall
/// time since `start` passed the limit.
class StopRequest {
public:
  using Clock = std::chrono::steady_clock;
  StopRequest(bool onSignal, std::optional<double> limitMinutes, Clock::time_point start);

  bool enabled() const { return onSignal_ || limitMinutes_.has_value(); }
  std::optional<double> limitMinutes() const { return limitMinutes_; }
  /// This rank's request now (`now` for tests).
  StopDecision local(Clock::time_point now = Clock::now()) const;
  /// Every rank's request combined (an all-reduce over every mesh axis, MAX): the same decision
  /// on every rank. Every rank must call it at the same step boundary.
  StatusOr<StopDecision> agree(comm::Communicator &comm,
                               Clock::time_point now = Clock::now()) const;

private:
  bool onSignal_;
  std::optional<double> limitMinutes_;
  Clock::time_point start_;
};

} // namespace megac::runtime::train
