// The fingerprint of a model (runtime/checkpoint/Integrity.h) from its canonical forward IR:
// what a checkpoint records at save and a resuming run compares at load.
#pragma once

#include "runtime/checkpoint/Integrity.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace megac::driver {

/// The fingerprint of `module` after the input pipeline, before the training phase: every
/// parameter's name and shape, and a hash of the forward function's ops (names, attributes,
/// operand structure, result ranks). Element types, the batch size and the layout are left out,
/// so a run under another layout or precision matches; `description` names the model.
runtime::checkpoint::ModelFingerprint fingerprintOf(mlir::ModuleOp module,
                                                    const std::string &description);

} // namespace megac::driver
