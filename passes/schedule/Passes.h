// The schedule phase's passes: pipeline split and forward/backward split with recompute
// (docs/pipeline.md).
#pragma once

#include "mlir/Pass/Pass.h"

namespace mega {
class MegaDialect;
} // namespace mega

namespace mlir::func {
class FuncDialect;
} // namespace mlir::func

namespace megac::passes {

/// Attribute names of the pipeline split (docs/pipeline.md): a stage module's stage, and the
/// stages a parameter argument is read on when there are several (a tied embedding).
inline constexpr const char *kStageAttr = "mega.stage";
inline constexpr const char *kSharedStagesAttr = "mega.shared_stages";

#define GEN_PASS_DECL
#include "passes/schedule/Passes.h.inc"

/// Registers the schedule passes with the global registry (for megac-opt).
#define GEN_PASS_REGISTRATION
#include "passes/schedule/Passes.h.inc"

} // namespace megac::passes
