// The JSON of `megac calibrate`'s tables (DeviceSpec::calibration) and of whole device specs.
#pragma once

#include "planner/Hardware.h"

#include <span>
#include <string>

namespace megac::json {
struct Value;
}

namespace megac::planner {

/// The memory-bound kernel classes a calibration's "kernels" table may name (the classes of
/// planner/KernelModel.h other than gemm and attention, by the same names).
std::span<const char *const> calibratedKernelClasses();

/// Reads a spec file's "calibration" object into `out`: "source" (string), "threads" (integer
/// >= 0), "instructionSeconds" (number >= 0) and the tables "gemm", "bandwidth", "kernels",
/// "attention", "comm" (arrays of objects, every field required, see deviceSpecJson). False with
/// a located one-line `error` ("calibration.gemm[3]: 'm' must be a positive integer").
bool parseCalibration(const json::Value &value, Calibration *out, std::string *error);

/// The tables a layout of `ranksPerNode` ranks with `threadsPerRank` kernel threads each runs at
/// (0 threads: megac train's default, the calibration's cores / ranksPerNode). A calibration
/// without occupancies (a `--ranks N` run, or a spec older than issue 34) is returned as it is:
/// its one set of tables serves every layout. Otherwise the measured occupancy (the top-level
/// tables: ranks = `ranks`, `threads`; and each of `occupancies`) nearest to the layout's in
/// (log2 threads per rank, log2 busy cores = ranks x threads), ties to the busier one (the
/// slower rates); on a machine of 1 or 2 cores every layout's occupancy is one measured. The
/// result holds that occupancy's tables at the top level, the comm table, no occupancies, and
/// says which it is in `chosen` ("alone-1t", ... ; "busy" for the top level).
Calibration calibrationFor(const Calibration &calibration, int64_t ranksPerNode,
                           int64_t threadsPerRank, std::string *chosen = nullptr);

/// A device spec file that loadDeviceSpec reads back to an equal DeviceSpec: every scalar field
/// by its name, and "calibration" when it is not empty. Numbers are written with 17 significant
/// digits, so the round trip is exact.
std::string deviceSpecJson(const DeviceSpec &device);

} // namespace megac::planner
