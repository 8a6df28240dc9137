// The MPI job of a multi-rank command (Job.h).
#include "driver/Job.h"

#include "driver/RunConfig.h"

#include "runtime/calibrate/Calibrate.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/train/StopRequest.h"

#include <chrono>

namespace megac::driver {

StatusOr<std::unique_ptr<Communicator>> joinCalibrationJob(int64_t ranks) {
  return runtime::comm::MpiCommunicator::create(runtime::calibrate::worldMesh(ranks),
                                                std::chrono::seconds(300));
}

Status handleStopSignals() {
  return runtime::train::installStopSignalHandler(
      runtime::train::stopSignals(/*underMpirun=*/launchedRanks() > 0));
}

void abortJob(int code) { runtime::comm::MpiCommunicator::abortJob(code); }

void setKernelThreads(int threads) { runtime::cpu::setKernelThreads(threads); }

} // namespace megac::driver
