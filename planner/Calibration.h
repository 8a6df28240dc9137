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

/// A device spec file that loadDeviceSpec reads back to an equal DeviceSpec: every scalar field
/// by its name, and "calibration" when it is not empty. Numbers are written with 17 significant
/// digits, so the round trip is exact.
std::string deviceSpecJson(const DeviceSpec &device);

} // namespace megac::planner
