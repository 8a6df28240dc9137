// The training precision of `megac train`: which float types a model uses, and its conversion
// from f32 to f64 (IR and weights) for --precision fp64.
#pragma once

#include "runtime/io/HostTensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <set>
#include <string>

namespace megac::cli {

/// The float element types of every tensor the module's ops use or make ("bf16", "f32", ...).
std::set<std::string> floatTypesIn(mlir::ModuleOp module);

/// Rewrites every f32 tensor in `module` to f64: function signatures, block arguments, op
/// results and constant values. Emits an error on an op it cannot convert.
mlir::LogicalResult convertToF64(mlir::ModuleOp module);

/// Converts every f32 tensor of `weights` to f64.
void convertWeightsToF64(runtime::TensorMap &weights);

} // namespace megac::cli
