// Lowers a single-rank mega function to a plan (runtime/plan/plan.fbs) and serializes it.
//
// One program, one role, one rank. Every SSA value gets a buffer with a static arena offset
// (codegen/MemoryPlanner.h); a reshape shares its input's bytes instead of copying them.
// mega.constant becomes a Constant, `mega.param` arguments Parameters, `mega.input` arguments
// (and unmarked ones, named "input_N") input Ports, results output Ports (named by
// `mega.output`, else "output_N"). Every other op becomes one Instruction. Ops with no
// single-rank lowering (collectives, send/recv, reshard, optimizer ops) are errors on the op.
#pragma once

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <string>
#include <vector>

namespace megac::codegen {

struct CodegenOptions {
  /// The function to lower; empty: the module's only function.
  std::string function;
  /// Safetensors file with parameter values, relative to the plan (may be empty).
  std::string weightsFile;
  /// Seed for parameters that no weights file provides.
  uint64_t seed = 0;
};

/// The plan's bytes, or failure after emitting diagnostics on the offending ops.
mlir::FailureOr<std::vector<uint8_t>> writePlan(mlir::ModuleOp module,
                                                const CodegenOptions &options);

} // namespace megac::codegen
