// Stop requests from signals and the wall-time limit, agreed by the ranks (StopRequest.h).
#include "runtime/train/StopRequest.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace megac::runtime::train {

namespace {

volatile std::sig_atomic_t gReceived = 0;

extern "C" void recordStopSignal(int signal) {
  if (gReceived == 0)
    gReceived = signal;
}

} // namespace

std::vector<int> stopSignals(bool underMpirun) {
  if (underMpirun)
    return {SIGUSR1, SIGUSR2};
  return {SIGUSR1, SIGUSR2, SIGTERM, SIGINT};
}

Status installStopSignalHandler(const std::vector<int> &signals) {
  for (int signal : signals) {
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_handler = recordStopSignal;
    sigemptyset(&action.sa_mask);
    // Interrupted system calls resume (MPI's and the file writes'); SIGTERM and SIGINT are
    // handled once, so a second one ends a run that does not reach a step boundary.
    action.sa_flags = SA_RESTART;
    if (signal == SIGTERM || signal == SIGINT)
      action.sa_flags |= SA_RESETHAND;
    if (sigaction(signal, &action, nullptr) != 0)
      return Status::error("cannot handle " + signalName(signal) + ": " + std::strerror(errno));
  }
  return Status::ok();
}

int receivedStopSignal() { return gReceived; }

void clearStopSignal() { gReceived = 0; }

std::string signalName(int signal) {
  switch (signal) {
  case SIGTERM:
    return "SIGTERM";
  case SIGINT:
    return "SIGINT";
  case SIGUSR1:
    return "SIGUSR1";
  case SIGUSR2:
    return "SIGUSR2";
  case SIGHUP:
    return "SIGHUP";
  default:
    return "signal " + std::to_string(signal);
  }
}

std::string StopDecision::reason(std::optional<double> limitMinutes) const {
  std::string out;
  if (signal)
    out = signalName(signal);
  if (timeLimit) {
    char minutes[32];
    std::snprintf(minutes, sizeof minutes, "%g", limitMinutes.value_or(0));
    out += std::string(out.empty() ? "" : " and ") + "the time limit of " + minutes + " minutes";
  }
  return out;
}

StopRequest::StopRequest(bool onSignal, std::optional<double> limitMinutes, Clock::time_point start)
    : onSignal_(onSignal), limitMinutes_(limitMinutes), start_(start) {}

StopDecision StopRequest::local(Clock::time_point now) const {
  StopDecision d;
  if (onSignal_)
    d.signal = receivedStopSignal();
  if (limitMinutes_)
    d.timeLimit = std::chrono::duration<double>(now - start_).count() >= *limitMinutes_ * 60.0;
  return d;
}

StatusOr<StopDecision> StopRequest::agree(comm::Communicator &comm, Clock::time_point now) const {
  StopDecision mine = local(now);
  // Small integers are exact in f64, the one dtype every communicator reduces.
  double values[2] = {double(mine.signal), mine.timeLimit ? 1.0 : 0.0};
  std::vector<uint32_t> axes(comm.mesh().axisNames.size());
  for (size_t a = 0; a < axes.size(); ++a)
    axes[a] = uint32_t(a);
  RETURN_IF_ERROR(comm.allReduce(axes, values, 2, DType::f64, comm::ReduceKind::max))
      << " (while the ranks agree whether to stop)";
  StopDecision agreed;
  agreed.signal = int(values[0]);
  agreed.timeLimit = values[1] != 0;
  return agreed;
}

} // namespace megac::runtime::train
