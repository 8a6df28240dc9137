// `megac calibrate`: runtime/calibrate's microbenchmarks run as a request says, and their results
// as the planner's device spec: the scalars from the measurements (efficiencies 1: the tables
// hold what is achieved), the tables as measured, link numbers from a datasheet preset or assumed
// where no collective was measured. MLIR-free and MPI-free, so megac-calibrate builds without the
// compiler (the MPI job of `--ranks N` is Job.h's).
#pragma once

#include "driver/Backend.h"

#include "planner/Hardware.h"
#include "runtime/calibrate/Results.h"
#include "runtime/comm/Communicator.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace megac::driver {

// The runtime's names a calibration's caller holds, re-exported (as Backend.h does).
using CalibrationResults = runtime::calibrate::Results;
using runtime::comm::Communicator;

/// What `megac calibrate` measures, and how.
struct CalibrateRequest {
  Backend backend = Backend::cpu;
  int64_t ranks = 1;   // the job's ranks (the world's size), recorded
  int64_t threads = 0; // CPU kernel threads per rank; 0: the node's cores over its ranks
  bool quick = false;  // a few points per group (tests)
  bool allowTf32 = false;
  /// Rank 0: one line per group measured.
  std::function<void(const std::string &)> progress;
};

/// Sets this process's kernel threads and runs the microbenchmarks, on this process alone
/// (`world` null) or with every rank of `world` at once; every rank returns the same tables.
StatusOr<CalibrationResults> calibrate(const CalibrateRequest &request,
                                       Communicator *world = nullptr);

/// Writes the device spec of `results` to `path` (atomically) and loads it back as the planner
/// will; returns summaryText. Errors say which of the two failed.
StatusOr<std::string> writeDeviceSpec(const std::string &path, const CalibrationResults &results);

planner::DeviceSpec deviceSpec(const runtime::calibrate::Results &results);

/// One calibration per machine (`megac calibrate --backend cpu` without --ranks): `busy` is the
/// spec of every core busy (cores ranks of 1 thread, collectives included) as the MPI job wrote
/// it; `alone` the runs of one rank alone (1 thread, every core's threads). Writes `busy` with
/// the alone tables as its calibration's occupancies (planner/Hardware.h) to `path`, loads it
/// back, and returns a summary.
StatusOr<std::string> writeMachineSpec(const std::string &path, planner::DeviceSpec busy,
                                       const std::vector<CalibrationResults> &alone);

/// One paragraph about the spec written at `path`: GEMM rates, copy bandwidth, instruction and
/// launch costs, kernel rates, collectives and links.
std::string summaryText(const std::string &path, const planner::DeviceSpec &spec,
                        const runtime::calibrate::Results &results);

} // namespace megac::driver
