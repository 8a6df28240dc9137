// Pass pipelines, one per phase, as the CLI's --compile-to stops them.
#pragma once

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

namespace megac::passes {

/// The input phase: raise (LayerNorm, GELU, linear, embedding, attention, trivial ops), split
/// fused projections into their parts, then canonicalize and CSE. Errors are emitted as diagnostics on the module's context.
mlir::LogicalResult runInputPipeline(mlir::ModuleOp module);

} // namespace megac::passes
