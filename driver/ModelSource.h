// Where a run's model comes from: a zoo spec (--model), a .mlir file (with its weights when it
// names a mega.weights file) or an ONNX file (with its initializers as weights); loading it into
// mega IR, and the loss it trains with, decided here and nowhere else.
#pragma once

#include "driver/SourceShapes.h"
#include "passes/training/TrainingPipeline.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megac::driver {

/// Bound input shapes for ONNX models, by input name.
using InputShapes = std::map<std::string, std::vector<int64_t>>;

/// The module attribute naming the weights file of a .mlir (relative to the .mlir's folder).
inline constexpr const char *kWeightsAttr = "mega.weights";

/// Exactly one of a zoo spec ("gpt:layers=2,...") and a model file (.onnx, else textual IR).
struct ModelSource {
  std::optional<std::string> spec, file;
  bool isOnnx() const;
};

/// The loss a model trains with: masked LM for BERT, seq2seq for T5, causal for every other zoo
/// model and for model files. The one place that decides it (training, `megac plan`).
passes::LossKind lossKindOf(const ModelSource &source);

struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string description; // the spec, or the file name
  double buildSeconds = 0; // time to build, parse or import the IR
  /// Parameter values that came with the model (ONNX initializers, a mega.weights file);
  /// empty for zoo models, whose parameters come from their init specs.
  TensorMap weights;
};

/// Loads `source` into `ctx`. `inputShapes` binds symbolic input dims of an ONNX model and is an
/// error for other sources. Located diagnostics (a .mlir's file:line:col with the line, an ONNX
/// model's node names) go to `diagnostics`; the error says what failed, in one line.
StatusOr<LoadedModel> loadModel(mlir::MLIRContext &ctx, const ModelSource &source,
                                const InputShapes &inputShapes = {},
                                llvm::raw_ostream &diagnostics = llvm::errs());

/// Gives each weight the shape its parameter has after the input pipeline: a parameter with
/// `mega.source_shape` (mega-split-fused-projections gave a fused projection's weight its part
/// dim) holds the same elements in the same order as the model's file, so only the shape
/// changes. A weight already in the parameter's shape is left alone.
Status fitWeightsToModel(mlir::ModuleOp module, TensorMap &weights);

/// The parameters with mega.source_shape, and that shape.
SourceShapes sourceShapesOf(mlir::ModuleOp module);

/// Parses `--input-shape` values "NAME=8x128" (a scalar is "NAME=").
StatusOr<InputShapes> parseInputShapes(const std::vector<std::string> &specs);

} // namespace megac::driver
