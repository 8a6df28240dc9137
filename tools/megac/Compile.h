// Compiling a model source (zoo spec, .mlir, .onnx) to plan bytes: shared by compile and run.
#pragma once

#include "codegen/PlanWriter.h"
#include "support/HostTensor.h"
#include "tools/megac/ModelSource.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::cli {

struct CompiledModel {
  std::vector<uint8_t> plan;
  /// Parameter values that came with the model (ONNX initializers, a mega.weights file);
  /// empty for zoo models, whose parameters are initialized from their init specs.
  TensorMap weights;
  std::string description;   // the spec or file name
  double loadSeconds = 0;    // building or parsing the IR
  double compileSeconds = 0; // input pipeline and codegen
};

/// Loads exactly one of `spec` and `file`, runs the input pipeline and writes the plan;
/// `options.weightsFile` is recorded only when the model comes with weights. Errors (one line,
/// or located diagnostics for IR problems) go to stderr, prefixed with `command`.
std::optional<CompiledModel> compileModel(const char *command,
                                          const std::optional<std::string> &spec,
                                          const std::optional<std::string> &file,
                                          const InputShapes &inputShapes,
                                          const codegen::CodegenOptions &options);

/// Parses a --seed value (a non-negative decimal integer).
std::optional<uint64_t> parseSeed(const std::string &text);

} // namespace megac::cli
