// Where a subcommand's model comes from: a zoo spec (--model) or a .mlir file.
#pragma once

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <optional>
#include <string>

namespace megac::cli {

struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string description; // the spec, or the file name
  double buildSeconds = 0; // time to build or parse the IR
};

/// Loads from exactly one of `spec` and `file`; prints a one-line error and returns nullopt
/// on failure.
std::optional<LoadedModel> loadModel(mlir::MLIRContext &ctx, const std::optional<std::string> &spec,
                                     const std::optional<std::string> &file);

} // namespace megac::cli
