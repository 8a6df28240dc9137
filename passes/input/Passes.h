// The input phase's passes: raising decomposed patterns into coarse mega ops.
#pragma once

#include "mlir/Pass/Pass.h"

namespace mega {
class MegaDialect;
} // namespace mega

namespace megac::passes {

#define GEN_PASS_DECL
#include "passes/input/Passes.h.inc"

/// Registers the input passes with the global registry (for megac-opt).
#define GEN_PASS_REGISTRATION
#include "passes/input/Passes.h.inc"

} // namespace megac::passes
