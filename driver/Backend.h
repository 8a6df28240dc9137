// Which backend a run uses (--backend cpu|cuda): the one choice every subcommand that runs plans
// makes the same way. MLIR-free. The CLI names the backend through here (driver::Backend).
#pragma once

#include "runtime/exec/Executor.h"
#include "support/Status.h"

#include <optional>
#include <string>

namespace megac::driver {

// The runtime's backend, re-exported: the CLI spells it driver::Backend and reaches runtime/
// only through the driver's headers (tools/megac/CheckIncludes.cmake).
using runtime::Backend;
using runtime::backendName;

/// `name` (cpu or cuda) or, when absent, cuda where a CUDA device is usable, else cpu; cuda
/// where none is usable is an error with the reason.
StatusOr<runtime::Backend> resolveBackend(const std::optional<std::string> &name);

} // namespace megac::driver
