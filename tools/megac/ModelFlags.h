// The model flags of the one-model subcommands (import, describe, compile, run): a model file
// or --model SPEC (a zoo spec or hf:PATH[,seq=S]), and --input-shape. Errors about the model
// itself print as "megac: error:".
#pragma once

#include "tools/megac/Cli.h"

#include "driver/Compile.h"
#include "driver/ModelSource.h"

#include <optional>
#include <string>
#include <vector>

namespace megac::cli {

struct ModelFlags {
  std::optional<std::string> spec, file; // as given; parsed into a ModelSource by load()
  driver::InputShapes inputShapes;
  std::vector<std::string> inputShapeSpecs;

  /// --model SPEC and, with `inputShape`, --input-shape NAME=D0xD1x...
  void declare(Flags &flags, bool inputShape = true);
  /// After flags.parse: the model file (the one positional argument) and the input shapes; a
  /// one-line error for a bad command line. `oneFile` is the error for several files.
  std::string configure(const Flags &flags, const char *oneFile = "give one model file");
  /// The model parsed (driver::ModelSource::parse) and loaded (errors printed as
  /// "megac: error: ...": nullopt).
  std::optional<driver::LoadedModel> load(mlir::MLIRContext &ctx) const;
  /// The model loaded and compiled to a one-rank plan; loading errors printed as megac's,
  /// compiling errors as `command`'s (nullopt).
  std::optional<driver::CompiledModel> compile(const char *command,
                                               const codegen::CodegenOptions &options) const;
};

} // namespace megac::cli
