// One training step on one rank: feeding a micro-batch's rows, forward and backward over the
// step's micro-batches (pipelined or not), the loss reduced over the job, the optimizer update
// (with dynamic loss scaling), and evaluations through the same program. TrainSession's parts.
#pragma once

#include "driver/RunConfig.h"
#include "driver/SourceShapes.h"

#include "passes/training/TrainingPipeline.h"
#include "runtime/comm/Communicator.h"
#include "runtime/data/Samples.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Trace.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/train/LossScaler.h"
#include "runtime/train/PipelineRunner.h"
#include "runtime/train/TrainLog.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::driver {

/// What one rank of the job is: its data-parallel coordinate, its communicator and, for a
/// pipelined plan, its pipeline run.
struct RankContext {
  const runtime::LoadedPlan *plan = nullptr;
  runtime::comm::Communicator *comm = nullptr;
  int64_t dpRank = 0;
  int64_t decoderSeq = 0;        // seq2seq: the decoder's length
  std::optional<int64_t> ppAxis; // the mesh axis "pp", when the plan has one of size > 1
  std::optional<runtime::train::PipelineRun> pipeline;
  runtime::Trace *trace = nullptr; // --trace
  std::string modelDescription;    // for checkpoints' meta.json
  const SourceShapes *sourceShapes = nullptr; // --save-grads writes the model's own shapes
  /// The last update deferred its parameter all-gathers (mega-training-defer-parameter-gather):
  /// the parameters hold the step before's values until the next step's first micro-batch or
  /// settleParameters gathers them.
  bool parametersPending = false;
  bool root() const { return comm->rank() == 0; }
};

/// Gathers the parameters an update left pending (the plan's @gather_parameters), so that
/// whatever reads them next (an evaluation, a save, an export) reads the step's values; nothing
/// when none are pending. After a load, nothing is pending: call clearPendingParameters.
Status settleParameters(runtime::Executor &executor, RankContext &rank);

/// The inputs of the training step megac train can feed (input_ids [b, S]; for encoder-decoder
/// models input_ids [b, E] and decoder_input_ids [b, D] with E + D = S; b per data-parallel
/// rank), and the float type of its scalars. A pipeline stage reads only some of them, and its
/// chunk functions also read activations, their gradients and stashed residuals (act.*,
/// grad.act.*, stash.*), which the pipeline runner sets.
StatusOr<DType> checkInputs(const runtime::Executor &executor, std::vector<int64_t> idsShape,
                            passes::LossKind kind, int64_t decoderSeq);

/// An evaluation (validation or the test part): the mean loss of evalIters batches of `samples`
/// on every rank, through the same forward_backward (its gradients are dropped).
StatusOr<double> evaluateLoss(runtime::Executor &executor, const RunConfig &c,
                              runtime::data::SampleSource &samples, passes::LossKind kind,
                              int64_t vocab, DType floatType, runtime::train::LossScaler *scaler,
                              RankContext &rank);

/// One optimizer step (docs/training-step.md, docs/pipeline.md); fills the record's loss and
/// grad_norm. A non-finite loss stops before the update (on every rank: the loss is reduced
/// over the job first).
Status trainStep(runtime::Executor &executor, const RunConfig &c, runtime::data::SampleSource &data,
                 passes::LossKind kind, int64_t vocab, DType floatType,
                 runtime::train::LossScaler *scaler, RankContext &rank,
                 runtime::train::StepRecord &record);

} // namespace megac::driver
