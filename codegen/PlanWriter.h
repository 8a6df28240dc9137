// Lowers the mega functions of a module to a plan (runtime/plan/plan.fbs) and serializes it:
// one plan Function per func; one program for the module, or, when the module holds one nested
// `mega.stage` module per pipeline stage (docs/pipeline.md), one program per stage with its
// pipeline schedule. A module-level `#mega.mesh` (mega.mesh) gives the rank table: every rank
// of the mesh runs the program of its pipeline stage (its pp coordinate), or the only one.
//
// Every SSA value gets a buffer with a static arena offset (codegen/MemoryPlanner.h); a reshape
// shares its input's bytes instead of copying them. mega.constant becomes a Constant;
// `mega.param` arguments Parameters and `mega.state` arguments StateBuffers, both persistent and
// shared by name across functions (one type per name); `mega.input` arguments (and unmarked
// ones, named "input_N", or "FUNC.input_N" in a module of several functions) input Ports;
// results output Ports named by `mega.output` (else "output_N" / "FUNC.output_N"), unless they
// carry only `mega.updates = NAME`: such a result replaces the parameter or state NAME (an
// argument of the same function) in place. The instruction producing it writes the persistent
// buffer directly when its opcode may write in place (runtime/plan/PlanRules.h), else a Copy at
// the function's end does; a read of the old value after that write is an error on the reader.
// Every other op becomes one Instruction. Ops with no single-rank lowering (collectives,
// send/recv, reshard) are errors on the op. See docs/training-step.md.
#pragma once

#include "parallel/PipelineSchedule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <string>
#include <vector>

namespace megac::codegen {

struct CodegenOptions {
  /// The one function to lower; empty: every function of the module.
  std::string function;
  /// Safetensors file with parameter values, relative to the plan (may be empty).
  std::string weightsFile;
  /// Seed for parameters that no weights file provides.
  uint64_t seed = 0;
  /// Pipelined modules: the schedule (1F1B runs interleaved when there are several chunks per
  /// stage; parallel/PipelineSchedule.h) and the micro-batches per optimizer step.
  schedule::ScheduleKind schedule = schedule::ScheduleKind::oneFOneB;
  int64_t microBatches = 1;
};

/// The plan's bytes, or failure after emitting diagnostics on the offending ops.
mlir::FailureOr<std::vector<uint8_t>> writePlan(mlir::ModuleOp module,
                                                const CodegenOptions &options);

} // namespace megac::codegen
