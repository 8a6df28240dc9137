// The MPI job of a multi-rank command, for the CLI: joining it for `megac calibrate --ranks N`
// (TrainSession joins its own), handling the signals that ask a run to stop, and ending every
// rank at once when one fails (a failing rank would leave the others waiting in a collective
// until the timeout).
#pragma once

#include "driver/Calibrate.h"

#include "support/Status.h"

#include <cstdint>
#include <memory>

namespace megac::driver {

/// This process's communicator in the job mpirun started with `ranks` ranks, on the one mesh
/// axis calibration measures collectives over.
StatusOr<std::unique_ptr<Communicator>> joinCalibrationJob(int64_t ranks);

/// Records the signals that ask a run to stop (SIGUSR1 and SIGUSR2; without mpirun SIGTERM and
/// SIGINT too), for TrainSession::agreeToStop.
Status handleStopSignals();

/// Sets and places this rank's kernel threads (runtime::cpu::setKernelThreads: OpenBLAS's and the
/// kernel pool's count; with more than one, the caller pinned to one CPU of the rank's block and
/// the workers to the others).
void setKernelThreads(int threads);

/// Ends every rank of the job with exit code `code`.
[[noreturn]] void abortJob(int code);

} // namespace megac::driver
