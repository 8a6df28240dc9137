// Compiling models to plans: a model's forward function to a one-rank plan (`megac compile`,
// `megac run`, `megac generate`), and a run's training step, partitioned by its Layout, to the
// plan of every rank (training, `megac plan`, `megac compile --ranks`).
#pragma once

#include "driver/ModelSource.h"
#include "driver/RunConfig.h"

#include "codegen/PlanWriter.h"
#include "runtime/checkpoint/Integrity.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace megac::driver {

struct CompiledModel {
  std::vector<uint8_t> plan;
  /// Parameter values that came with the model (ONNX initializers, a mega.weights file);
  /// empty for zoo models, whose parameters are initialized from their init specs.
  TensorMap weights;
  std::string description;   // the spec or file name
  double loadSeconds = 0;    // building or parsing the IR
  double compileSeconds = 0; // input pipeline and codegen
  /// An hf: model's weights file (driver/HfWeights.h), read into the executor's parameters;
  /// empty when the source has none.
  std::string hfWeightsFile;
  SourceShapes sourceShapes; // parameters held in another shape than the model's files
};

/// Runs the input pipeline on a loaded model and writes its plan; `options.weightsFile` is
/// recorded only when the model comes with weights, which must fit the plan's parameters.
/// Located diagnostics go to `diagnostics`.
StatusOr<CompiledModel> compileForward(LoadedModel model, const codegen::CodegenOptions &options,
                                       llvm::raw_ostream &diagnostics = llvm::errs());

/// loadModel, then compileForward.
StatusOr<CompiledModel> compileModel(const ModelSource &source, const InputShapes &inputShapes,
                                     const codegen::CodegenOptions &options,
                                     llvm::raw_ostream &diagnostics = llvm::errs());

/// The training step's plan and the model's weights.
struct TrainModel {
  std::vector<uint8_t> plan;
  TensorMap weights;
  std::string description;
  int64_t vocab = 0;
  int64_t decoderSeq = 0; // seq2seq (t5): the decoder's length D
  passes::LossKind lossKind = passes::LossKind::causal;
  double compileSeconds = 0;
  runtime::checkpoint::ModelFingerprint fingerprint; // checked when a checkpoint loads
  SourceShapes sourceShapes; // parameters held in another shape than the model's files
  /// Model FLOPs per token of a training step (planner::ModelStats::trainingFlops over the
  /// forward graph's tokens, after the input phase): what the step log's TFLOP/s and MFU use.
  double trainingFlopsPerToken = 0;
};

/// The training step of `c` compiled for rows of `seq` tokens: the model bound to the data (a
/// zoo spec's seq and batch, an ONNX model's input_ids [b*dp, seq]), its input and training
/// phases partitioned by the layout, codegen with the layout's schedule.
StatusOr<TrainModel> compileTrainingStep(const RunConfig &c, int64_t seq,
                                         llvm::raw_ostream &diagnostics = llvm::errs());

/// The training step of a plan-only run (`megac plan`, `megac compile` with a layout): for the
/// data's rows when it has data, else the zoo spec's sequence (t5: seq + dec_seq).
StatusOr<TrainModel> compileRunPlan(const RunConfig &c,
                                    llvm::raw_ostream &diagnostics = llvm::errs());

/// A --seed value: a non-negative decimal integer.
std::optional<uint64_t> parseSeed(const std::string &text);

} // namespace megac::driver
