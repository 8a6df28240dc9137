// Where a run's model comes from, parsed once where the command line is read: a zoo spec
// (--model gpt:...), a transformers config.json (--model hf:PATH[,seq=S]), a .mlir file (with
// its weights when it names a mega.weights file) or an ONNX file (with its initializers as
// weights); loading it into mega IR, and the loss it trains with, decided here and nowhere else.
#pragma once

#include "driver/SourceShapes.h"
#include "frontends/models/HfConfig.h"
#include "frontends/models/ModelConfig.h"
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
#include <variant>
#include <vector>

namespace megac::driver {

/// Bound input shapes for ONNX models, by input name.
using InputShapes = std::map<std::string, std::vector<int64_t>>;

/// The module attribute naming the weights file of a .mlir (relative to the .mlir's folder).
inline constexpr const char *kWeightsAttr = "mega.weights";

/// --model SPEC of the zoo ("gpt:layers=2,..."), parsed.
struct ZooSpec {
  models::ModelConfig config;
  bool batchGiven = false; // the spec says batch= (training checks it against --micro-batch)
};

/// --model hf:PATH[,seq=S]: a transformers config.json read into the zoo's config.
struct HfSpec {
  models::HfModel model;
  std::optional<int64_t> seq; // seq=S; absent: the data's, or --seq's
};

/// A model file: ONNX (.onnx) or textual mega IR (anything else).
struct OnnxFile {
  std::string path;
};
struct IrFile {
  std::string path;
};

/// The model of a run or a command: one typed value, parsed once from --model or the file
/// argument, then passed on; nothing downstream reads the spec text again.
class ModelSource {
public:
  using Value = std::variant<std::monostate, ZooSpec, HfSpec, OnnxFile, IrFile>;

  ModelSource() = default;
  /// Exactly one of --model SPEC (a zoo spec or hf:PATH[,seq=S]) and a model file; errors
  /// begin "--model: " for a bad spec.
  static StatusOr<ModelSource> parse(const std::optional<std::string> &spec,
                                     const std::optional<std::string> &file);
  static StatusOr<ModelSource> fromSpec(const std::string &spec);
  /// A zoo model of a config already checked (its batch counts as given: training keeps it).
  static ModelSource fromConfig(models::ModelConfig config);
  /// An ONNX (.onnx) or IR (any other name) model file.
  static ModelSource fromFile(std::string path);

  const Value &value() const { return value_; }
  bool empty() const { return std::holds_alternative<std::monostate>(value_); }
  bool isOnnx() const { return std::holds_alternative<OnnxFile>(value_); }
  bool isHf() const { return std::holds_alternative<HfSpec>(value_); }
  /// The model file's path; null for zoo and HF models.
  const std::string *file() const;
  /// The zoo config a zoo or HF model is built from (an HF model's seq is 0 until bound); null
  /// for model files.
  const models::ModelConfig *config() const;
  /// The source as given ("gpt:layers=2,...", "hf:DIR,seq=S", the file).
  const std::string &text() const { return text_; }

  /// A zoo or HF source whose config is `config` (seq and batch bound); an HF model's sequence
  /// is checked against the family's sliding window and every config as a zoo spec is.
  StatusOr<ModelSource> bound(models::ModelConfig config) const;

private:
  Value value_;
  std::string text_;
};

/// The loss a model trains with: masked LM for BERT, seq2seq for T5, causal for every other zoo
/// model and for model files. The one place that decides it (training, `megac plan`).
passes::LossKind lossKindOf(const ModelSource &source);

struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string description; // the spec (hf:PATH and the spec it reads as), or the file name
  double buildSeconds = 0; // time to build, parse or import the IR
  /// Parameter values that came with the model (ONNX initializers, a mega.weights file);
  /// empty for zoo models, whose parameters come from their init specs.
  TensorMap weights;
  /// An hf: folder's weights file (model.safetensors[.index.json]), read lazily into each
  /// rank's parameter shards by driver/HfWeights.h; empty when the source has none.
  std::string hfWeightsFile;
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
