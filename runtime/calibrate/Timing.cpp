// Timing calls on every rank at once (Timing.h).
#include "runtime/calibrate/Timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace megac::runtime::calibrate {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status Sync::barrier() { return world_ ? world_->barrier() : Status::ok(); }

StatusOr<double> Sync::max(double value) {
  if (!world_ || world_->size() == 1)
    return value;
  const uint32_t axes[] = {0};
  RETURN_IF_ERROR(world_->allReduce(axes, &value, 1, DType::f64, comm::ReduceKind::max))
      << " (calibrate: agreeing on a measurement)";
  return value;
}

StatusOr<double> timeCall(Sync &sync, const std::function<Status()> &call,
                          const TimingPolicy &policy) {
  RETURN_IF_ERROR(call()); // warm-up: first touches, caches, lazy initialization
  // Probe: the same number of calls on every rank (a collective must match), until the slowest
  // rank has spent a 20th of the target.
  double perCall = 0;
  for (int calls = 1;; calls *= 2) {
    RETURN_IF_ERROR(sync.barrier());
    double start = now();
    for (int i = 0; i < calls; ++i)
      RETURN_IF_ERROR(call());
    ASSIGN_OR_RETURN(double elapsed, sync.max(now() - start));
    perCall = elapsed / calls;
    if (elapsed >= policy.targetSeconds / 20 || calls >= policy.maxRepetitions)
      break;
  }
  // One call already longer than the target: the probe was the measurement.
  if (perCall >= policy.targetSeconds)
    return perCall;
  int repetitions = int(std::clamp(std::ceil(policy.targetSeconds / std::max(perCall, 1e-9)), 1.0,
                                   double(policy.maxRepetitions)));
  int batches = std::max(1, std::min(policy.batches, repetitions));
  int perBatch = (repetitions + batches - 1) / batches;
  std::vector<double> means;
  RETURN_IF_ERROR(sync.barrier());
  for (int b = 0; b < batches; ++b) {
    double start = now();
    for (int i = 0; i < perBatch; ++i)
      RETURN_IF_ERROR(call());
    means.push_back((now() - start) / perBatch);
  }
  std::sort(means.begin(), means.end());
  double median = means.size() % 2 ? means[means.size() / 2]
                                   : 0.5 * (means[means.size() / 2 - 1] + means[means.size() / 2]);
  return sync.max(median);
}

} // namespace megac::runtime::calibrate
