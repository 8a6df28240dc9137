// The training phase's passes: precision, loss, autodiff and optimizer (docs/training-step.md).
#pragma once

#include "mlir/Pass/Pass.h"

namespace mega {
class MegaDialect;
} // namespace mega

namespace mlir::func {
class FuncDialect;
} // namespace mlir::func

namespace megac::passes {

/// Attribute names of the training step's signatures beyond ir/MegaDialect.h's: a persistent
/// state argument (gradient accumulators, Adam moments) and a result that replaces a parameter
/// or state when the function ends.
inline constexpr const char *kStateAttr = "mega.state";
inline constexpr const char *kUpdatesAttr = "mega.updates";
/// On @forward_backward: the loss kind it was built for ("causal" or "mlm").
inline constexpr const char *kLossKindAttr = "mega.loss_kind";

#define GEN_PASS_DECL
#include "passes/training/Passes.h.inc"

/// Registers the training passes with the global registry (for megac-opt).
#define GEN_PASS_REGISTRATION
#include "passes/training/Passes.h.inc"

} // namespace megac::passes
