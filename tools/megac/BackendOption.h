// `--backend cpu|cuda` and `--allow-tf32`, shared by `megac train` and `megac run`.
#pragma once

#include "runtime/exec/Executor.h"
#include "tools/megac/Args.h"

#include <string>

namespace megac::cli {

/// --backend cpu|cuda into `backend`: cuda by default when a CUDA device is usable, else cpu;
/// asking for cuda where none is usable is an error with the reason in one line. --allow-tf32
/// into `allowTf32`. Returns the error, or empty.
std::string parseBackendOption(const Args &args, runtime::Backend &backend, bool &allowTf32);

} // namespace megac::cli
