// Timing a call on every rank at once: the ranks agree on how often to repeat it, start together
// and report the slowest rank's median, so a measurement includes what the ranks of one node cost
// each other (shared caches, memory bandwidth), as in training.
#pragma once

#include "runtime/comm/Communicator.h"
#include "support/Status.h"

#include <functional>
#include <vector>

namespace megac::runtime::calibrate {

/// The ranks' agreement: barriers and maxima over the job (a communicator whose mesh has one
/// axis over every rank), or nothing to agree with in a one-rank job (null).
class Sync {
public:
  explicit Sync(comm::Communicator *world) : world_(world) {}
  int rank() const { return world_ ? world_->rank() : 0; }
  int ranks() const { return world_ ? world_->size() : 1; }
  comm::Communicator *world() const { return world_; }
  Status barrier();
  /// The largest of every rank's `value`.
  StatusOr<double> max(double value);

private:
  comm::Communicator *world_;
};

struct TimingPolicy {
  double targetSeconds = 0.05; // time spent repeating one point (after warm-up and probe)
  int maxRepetitions = 100000;
  int batches = 5; // the result is the median of the batches' means
};

/// Seconds of one `call`, every rank calling it the same number of times: one warm-up call,
/// probe rounds of 1, 2, 4, ... calls until the slowest rank has spent a 20th of the target, as
/// many repetitions as fill the target at the slowest rank's pace, in `batches` batches after a
/// barrier; the median of the batch means, the max over ranks. `call` may be a collective.
StatusOr<double> timeCall(Sync &sync, const std::function<Status()> &call,
                          const TimingPolicy &policy);

/// Seconds since an arbitrary start (steady clock).
double now();

} // namespace megac::runtime::calibrate
