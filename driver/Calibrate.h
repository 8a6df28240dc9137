// `megac calibrate`'s results (runtime/calibrate) as the planner's device spec: the scalars from
// the measurements (efficiencies 1: the tables hold what is achieved), the tables as measured,
// link numbers from a datasheet preset or assumed where no collective was measured. MLIR-free,
// so megac-calibrate builds without the compiler.
#pragma once

#include "planner/Hardware.h"
#include "runtime/calibrate/Results.h"

#include <string>

namespace megac::driver {

planner::DeviceSpec deviceSpec(const runtime::calibrate::Results &results);

/// One paragraph about the spec written at `path`: GEMM rates, copy bandwidth, instruction and
/// launch costs, kernel rates, collectives and links.
std::string summaryText(const std::string &path, const planner::DeviceSpec &spec,
                        const runtime::calibrate::Results &results);

} // namespace megac::driver
