// Where a subcommand's model comes from: a zoo spec (--model), a .mlir file (with its weights
// when it names a mega.weights file) or an ONNX file (with its initializers as weights).
#pragma once

#include "support/HostTensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megac::cli {

/// Bound input shapes for ONNX models, by input name.
using InputShapes = std::map<std::string, std::vector<int64_t>>;

/// The module attribute naming the weights file of a .mlir (relative to the .mlir's folder).
inline constexpr const char *kWeightsAttr = "mega.weights";

struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string description; // the spec, or the file name
  double buildSeconds = 0; // time to build, parse or import the IR
  /// Parameter values that came with the model (ONNX initializers, a mega.weights file);
  /// empty for zoo models, whose parameters come from their init specs.
  megac::TensorMap weights;
};

/// Loads from exactly one of `spec` and `file` (.onnx, or textual IR otherwise); prints
/// errors (one line, or located diagnostics) and returns nullopt on failure. `inputShapes`
/// binds symbolic input dims of an ONNX model and is an error for other sources.
std::optional<LoadedModel> loadModel(mlir::MLIRContext &ctx, const std::optional<std::string> &spec,
                                     const std::optional<std::string> &file,
                                     const InputShapes &inputShapes = {});

/// Parses `--input-shape` values "NAME=8x128" (a scalar is "NAME="); returns an error
/// message or empty.
std::string parseInputShapes(const std::vector<std::string> &specs, InputShapes &shapes);

} // namespace megac::cli
