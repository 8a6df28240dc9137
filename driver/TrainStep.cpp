// One training step on one rank (TrainStep.h).
#include "driver/TrainStep.h"

#include "runtime/exec/Parameters.h"
#include "runtime/exec/ShardGather.h"
#include "runtime/io/Safetensors.h"
#include "runtime/train/TokenBatches.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

namespace megac::driver {

namespace {

namespace train = runtime::train;

/// "0.001", "1e+30": a number for messages.
std::string shortNumber(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", value);
  return buf;
}

/// A 0-d tensor of a float dtype.
HostTensor floatScalar(DType dtype, double value) {
  HostTensor t = HostTensor::zeros(dtype, {});
  if (dtype == DType::f64)
    *t.data<double>() = value;
  else
    *t.data<float>() = static_cast<float>(value);
  return t;
}

/// The value of a 0-d f32 or f64 tensor.
double scalarValue(const HostTensor &t) {
  return t.dtype == DType::f64 ? *t.data<double>() : *t.data<float>();
}

/// `ids` (i64) as the dtype the plan wants (i64 or i32).
HostTensor asIndexType(const HostTensor &ids, DType dtype) {
  if (dtype != DType::i32)
    return ids;
  HostTensor narrow = HostTensor::zeros(dtype, ids.shape);
  for (int64_t i = 0; i < ids.numElements(); ++i)
    narrow.data<int32_t>()[i] = static_cast<int32_t>(ids.data<int64_t>()[i]);
  return narrow;
}

/// A tensor of ones of the given dtype and shape (the attention mask).
HostTensor ones(const runtime::TensorInfo &info) {
  HostTensor t = HostTensor::zeros(info.dtype, info.shape);
  for (int64_t i = 0; i < t.numElements(); ++i)
    switch (info.dtype) {
    case DType::i64:
      t.data<int64_t>()[i] = 1;
      break;
    case DType::i32:
      t.data<int32_t>()[i] = 1;
      break;
    case DType::f64:
      t.data<double>()[i] = 1;
      break;
    case DType::f32:
      t.data<float>()[i] = 1;
      break;
    default:
      t.bytes[i * dtypeSize(info.dtype)] = 1; // i1
    }
  return t;
}

/// Whether the executor's program has an input `name` (pipeline stages read only some).
bool hasInput(const runtime::Executor &executor, const std::string &name) {
  std::vector<std::string> names = executor.inputNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool hasOutput(const runtime::Executor &executor, const std::string &name) {
  std::vector<std::string> names = executor.outputNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// The values of an f32 or f64 tensor, as doubles.
std::vector<double> valuesOf(const HostTensor &t) {
  std::vector<double> out(static_cast<size_t>(t.numElements()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = t.dtype == DType::f64 ? t.data<double>()[i] : double(t.data<float>()[i]);
  return out;
}

/// A step's mixture-of-experts metrics (docs/moe.md): the forward's `moe.*` outputs summed over
/// the micro-batches, then over each output's partial axes and the pipeline stages.
class MoeMetrics {
public:
  /// Adds this micro-batch's outputs, if the program has them; `prefix` "last." reads those of
  /// forward_backward_apply.
  Status add(const runtime::Executor &executor, const std::string &prefix = "") {
    if (!hasOutput(executor, "moe.load"))
      return Status::ok();
    for (size_t i = 0; i < kOutputs.size(); ++i) {
      ASSIGN_OR_RETURN(HostTensor value, executor.output(prefix + kOutputs[i]));
      std::vector<double> values = valuesOf(value);
      if (sums_[i].empty())
        sums_[i].assign(values.size(), 0.0);
      if (i == 0)
        experts_ = value.shape.empty() ? 1 : value.shape.back();
      for (size_t j = 0; j < values.size() && j < sums_[i].size(); ++j)
        sums_[i][j] += values[j];
    }
    return Status::ok();
  }

  /// The step's metrics, the same on every rank; nullopt for a model without MoE layers.
  StatusOr<std::optional<train::StepRecord::Moe>> finish(const runtime::Executor &executor,
                                                         RankContext &rank) {
    if (hasOutput(executor, "moe.load"))
      for (size_t i = 0; i < kOutputs.size(); ++i) {
        ASSIGN_OR_RETURN(std::vector<uint32_t> axes, executor.outputPartialAxes(kOutputs[i]));
        if (!axes.empty() && !sums_[i].empty())
          RETURN_IF_ERROR(rank.comm->allReduce(axes, sums_[i].data(), sums_[i].size(), DType::f64,
                                               runtime::comm::ReduceKind::sum))
              << " (summing " << kOutputs[i] << ")";
      }
    if (rank.ppAxis) { // only the last stage has them: the sizes first, then the values
      uint32_t pp[] = {uint32_t(*rank.ppAxis)};
      double sizes[2] = {double(sums_[0].size()), double(experts_)};
      RETURN_IF_ERROR(
          rank.comm->allReduce(pp, sizes, 2, DType::f64, runtime::comm::ReduceKind::max))
          << " (the MoE metrics' size)";
      experts_ = int64_t(sizes[1]);
      for (size_t i = 0; i < kOutputs.size(); ++i) {
        sums_[i].resize(i == 0 ? size_t(sizes[0]) : 1, 0.0);
        if (sizes[0] > 0)
          RETURN_IF_ERROR(rank.comm->allReduce(pp, sums_[i].data(), sums_[i].size(), DType::f64,
                                               runtime::comm::ReduceKind::sum))
              << " (taking " << kOutputs[i] << " from the last pipeline stage)";
      }
    }
    if (sums_[0].empty() || experts_ < 1)
      return std::optional<train::StepRecord::Moe>();
    train::StepRecord::Moe moe;
    for (size_t i = 0; i + size_t(experts_) <= sums_[0].size(); i += size_t(experts_))
      moe.load.emplace_back(sums_[0].begin() + long(i),
                            sums_[0].begin() + long(i + size_t(experts_)));
    moe.dropped = sums_[1].empty() ? 0 : sums_[1][0];
    moe.auxLoss = sums_[2].empty() ? 0 : sums_[2][0];
    return std::optional(moe);
  }

private:
  static constexpr std::array<const char *, 3> kOutputs = {"moe.load", "moe.dropped",
                                                           "moe.aux_loss"};
  std::array<std::vector<double>, 3> sums_;
  int64_t experts_ = 0;
};

/// Sets the data inputs of micro-batch `mb` (this rank's rows) that the program reads.
Status setMicroBatch(runtime::Executor &executor, const train::MicroBatch &mb,
                     passes::LossKind kind, DType idsType) {
  if (hasInput(executor, "input_ids"))
    RETURN_IF_ERROR(executor.setInput("input_ids", asIndexType(mb.inputIds, idsType)));
  if (kind == passes::LossKind::seq2seq && hasInput(executor, "decoder_input_ids"))
    RETURN_IF_ERROR(
        executor.setInput("decoder_input_ids", asIndexType(mb.decoderInputIds, idsType)));
  if (hasInput(executor, "labels"))
    RETURN_IF_ERROR(executor.setInput("labels", mb.labels));
  // Padded rows (--pad-token-id): this micro-batch's mask; otherwise the ones batchLoss set.
  if (!mb.attentionMask.shape.empty() && hasInput(executor, "attention_mask")) {
    ASSIGN_OR_RETURN(runtime::TensorInfo mask, executor.inputInfo("attention_mask"));
    if (mask.dtype != DType::i64 && mask.dtype != DType::i32)
      return Status::error(std::string("the model's attention_mask is ") + dtypeName(mask.dtype) +
                           "; --pad-token-id fills an integer mask of 1 (token) and 0 (padding)");
    RETURN_IF_ERROR(executor.setInput("attention_mask", asIndexType(mb.attentionMask, mask.dtype)));
  }
  return Status::ok();
}

/// The function that runs the last micro-batch's forward and backward and the update
/// (mega-training-fuse-last-micro-batch, `--overlap on` at pp 1); its outputs are named
/// "last.<name>".
constexpr const char *kFusedStep = "forward_backward_apply";

/// The functions of a plan whose update defers its parameter all-gathers into the next step
/// (mega-training-defer-parameter-gather): the first micro-batch after such an update runs the
/// "gather_" copy of its function (outputs "gathered.<name>"), and @gather_parameters gathers
/// them alone.
constexpr const char *kGatherPrefix = "gather_";
constexpr const char *kGatheredOutputs = "gathered.";
constexpr const char *kGatherParameters = "gather_parameters";

bool hasFunction(const runtime::Executor &executor, const std::string &name) {
  std::vector<std::string> names = executor.functionNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// The update of a training step, for batchLoss to run fused with the last micro-batch when the
/// plan has kFusedStep: set `ran` and record.gradNorm when it did.
struct FusedUpdate {
  double lr = 0;
  int64_t step = 0;
  bool ran = false;
};

/// Whether batchLoss runs the step's update with its last micro-batch: the plan has the fused
/// function, the step is not pipelined, and no loss scaler must check the gradients for an
/// overflow before they are applied (fp16 keeps check_gradients, then apply_gradients).
bool fusesUpdate(const runtime::Executor &executor, const RankContext &rank,
                 const train::LossScaler *scaler) {
  std::vector<std::string> names = executor.functionNames();
  return !scaler && !rank.pipeline &&
         std::find(names.begin(), names.end(), kFusedStep) != names.end();
}

/// Sets the update's inputs: the learning rate and the 1-based step.
Status setUpdateInputs(runtime::Executor &executor, DType floatType, double lr, int64_t step) {
  RETURN_IF_ERROR(executor.setInput("lr", floatScalar(floatType, lr)));
  HostTensor stepTensor = HostTensor::zeros(DType::i64, {});
  *stepTensor.data<int64_t>() = step;
  return executor.setInput("step", stepTensor);
}

/// Forward and backward of global batch `step` (0-based) of `data`, every micro-batch, the
/// gradients accumulated; returns the batch's mean loss on every rank. This rank reads only its
/// data-parallel rows of each micro-batch. With `update` (a training step, not an evaluation)
/// and a plan that fuses it (fusesUpdate), the last micro-batch runs forward_backward_apply:
/// its backward, then the update, whose dp reduction overlaps that backward.
StatusOr<double> batchLoss(runtime::Executor &executor, const RunConfig &c,
                           runtime::data::SampleSource &data, int64_t step, passes::LossKind kind,
                           int64_t vocab, DType floatType, train::LossScaler *scaler,
                           RankContext &rank, train::StepRecord &record,
                           FusedUpdate *update = nullptr) {
  std::vector<train::MicroBatch> batches;
  train::RankRows rows{rank.dpRank * c.layout().microBatch, c.layout().microBatch};
  if (kind == passes::LossKind::seq2seq) {
    int64_t seq = data.rowLength() - 1, dec = rank.decoderSeq;
    ASSIGN_OR_RETURN(batches, train::seq2seqStep(data, step, c.data.batch, seq - dec, dec, rows));
  } else if (kind == passes::LossKind::mlm) {
    ASSIGN_OR_RETURN(batches,
                     train::mlmStep(data, step, c.data.batch,
                                    {c.seed, c.data.maskTokenId.value_or(vocab - 1), 0.15}, rows));
  } else {
    ASSIGN_OR_RETURN(batches, train::causalStep(data, step, c.data.batch, rows, c.data.padTokenId));
  }
  // The normalizer counts the global batch's targets, so every rank's share sums to the mean.
  // Every row of a kind has the same number of labels (causal S, masked-LM round(0.15 S),
  // seq2seq D), so the batch's is this rank's times the ranks sharing the micro-batch; padded
  // rows (--pad-token-id) differ, so every rank counts the whole batch's (reading its rows).
  int64_t targets =
      train::targetTokens(batches) * (c.data.batch.microBatch / c.layout().microBatch);
  if (c.data.padTokenId && kind == passes::LossKind::causal &&
      c.data.batch.microBatch != c.layout().microBatch) {
    ASSIGN_OR_RETURN(std::vector<train::MicroBatch> whole,
                     train::causalStep(data, step, c.data.batch, {}, c.data.padTokenId));
    targets = train::targetTokens(whole);
  }
  if (targets == 0)
    return Status::error("batch " + std::to_string(step + 1) + " has no labelled tokens");
  DType idsType = DType::i64;
  for (const char *name : {"input_ids", "decoder_input_ids"})
    if (hasInput(executor, name)) {
      ASSIGN_OR_RETURN(runtime::TensorInfo ids, executor.inputInfo(name));
      idsType = ids.dtype;
    }
  if (hasInput(executor, "attention_mask")) {
    ASSIGN_OR_RETURN(runtime::TensorInfo mask, executor.inputInfo("attention_mask"));
    RETURN_IF_ERROR(executor.setInput("attention_mask", ones(mask)));
  }
  if (hasInput(executor, "loss_normalizer"))
    RETURN_IF_ERROR(executor.setInput("loss_normalizer", floatScalar(floatType, 1.0 / targets)));
  // MoE layers' auxiliary losses are means over the global batch's sequences (docs/moe.md).
  if (hasInput(executor, "row_normalizer"))
    RETURN_IF_ERROR(executor.setInput(
        "row_normalizer", floatScalar(floatType, 1.0 / double(c.data.batch.globalBatch))));
  MoeMetrics moe;
  if (scaler) {
    record.lossScale = scaler->scale();
    if (hasInput(executor, "loss_scale"))
      RETURN_IF_ERROR(executor.setInput("loss_scale", floatScalar(floatType, scaler->scale())));
  }
  double loss = 0;
  if (rank.pipeline) {
    rank.pipeline->setDataInputs = [&](int64_t m) {
      return setMicroBatch(executor, batches[size_t(m)], kind, idsType);
    };
    rank.pipeline->afterLastForward = [&] { return moe.add(executor); };
    StatusOr<double> sum = train::runPipelinedMicroBatches(executor, *rank.comm, *rank.pipeline);
    rank.pipeline->setDataInputs = nullptr;
    rank.pipeline->afterLastForward = nullptr;
    if (!sum.isOk())
      return sum.status();
    loss = sum.value();
  } else {
    RETURN_IF_ERROR(executor.zeroState("grad."));
    bool fused = update && fusesUpdate(executor, rank, scaler);
    if (fused)
      RETURN_IF_ERROR(setUpdateInputs(executor, floatType, update->lr, update->step));
    // An evaluation reads the parameters as they are: gather what the last update deferred.
    if (!update)
      RETURN_IF_ERROR(settleParameters(executor, rank));
    for (size_t k = 0; k < batches.size(); ++k) {
      // Nothing is in flight between functions (every start is done in its own function), so
      // an evaluation, a save or a stop after this step finds the arena settled; a deferred
      // parameter gather waits in its pending state for the next step's first micro-batch.
      bool last = fused && k + 1 == batches.size();
      bool gathers = k == 0 && rank.parametersPending;
      std::string prefix = std::string(gathers ? kGatheredOutputs : "") + (last ? "last." : "");
      std::string function = last ? kFusedStep : "forward_backward";
      RETURN_IF_ERROR(setMicroBatch(executor, batches[k], kind, idsType));
      RETURN_IF_ERROR(executor.run(gathers ? kGatherPrefix + function : function));
      if (gathers)
        rank.parametersPending = false;
      ASSIGN_OR_RETURN(HostTensor part, executor.output(prefix + "loss"));
      loss += scalarValue(part);
      RETURN_IF_ERROR(moe.add(executor, prefix));
      if (last) {
        ASSIGN_OR_RETURN(HostTensor norm, executor.output(prefix + "grad_norm"));
        record.gradNorm = scalarValue(norm);
        update->ran = true;
        rank.parametersPending = hasFunction(executor, kGatherParameters);
      }
    }
  }
  ASSIGN_OR_RETURN(record.moe, moe.finish(executor, rank));
  // The logged loss: the data-parallel shares summed (the output's partial axes), and with
  // pipeline stages the last stage's value (the others hold 0), on every rank.
  if (hasOutput(executor, "loss")) {
    ASSIGN_OR_RETURN(std::vector<uint32_t> axes, executor.outputPartialAxes("loss"));
    if (!axes.empty())
      RETURN_IF_ERROR(
          rank.comm->allReduce(axes, &loss, 1, DType::f64, runtime::comm::ReduceKind::sum))
          << " (summing the loss)";
  }
  if (rank.ppAxis) {
    uint32_t pp[] = {uint32_t(*rank.ppAxis)};
    RETURN_IF_ERROR(rank.comm->allReduce(pp, &loss, 1, DType::f64, runtime::comm::ReduceKind::sum))
        << " (taking the loss from the last pipeline stage)";
  }
  return loss;
}

/// --save-grads writes only finite gradients, as a non-finite loss stops the run: a step whose
/// gradient overflowed would turn every parameter it updates into NaN, and a file of NaNs would
/// pass for a result. fp16 runs are exempt: there an overflowing step is the loss scaler's to
/// skip (the log says so), and the gradients are written loss-scaled.
Status refuseNonFiniteGradients(const TensorMap &grads, int64_t step) {
  for (const auto &[name, grad] : grads)
    if (int64_t bad = countNonFinite(grad))
      return Status::error("step " + std::to_string(step) + "'s gradient of " + name + " has " +
                           std::to_string(bad) + " non-finite values (of " +
                           std::to_string(grad.numElements()) +
                           "); --save-grads does not write them. Lower --lr, clip the gradients "
                           "(--clip-grad) or look for an overflow in the model's forward pass");
  return Status::ok();
}

} // namespace

/// The inputs of the training step megac train can feed (input_ids [b, S]; for encoder-decoder
/// models input_ids [b, E] and decoder_input_ids [b, D] with E + D = S; b per data-parallel
/// rank), and the float type of its scalars. A pipeline stage reads only some of them, and its
/// chunk functions also read activations, their gradients and stashed residuals (act.*,
/// grad.act.*, stash.*), which the pipeline runner sets.
StatusOr<DType> checkInputs(const runtime::Executor &executor, std::vector<int64_t> idsShape,
                            passes::LossKind kind, int64_t decoderSeq) {
  bool pipelined = !executor.schedule().empty();
  std::vector<std::string> names = executor.functionNames();
  for (const char *function : {"forward_backward", "apply_gradients"})
    if (std::find(names.begin(), names.end(), function) == names.end() &&
        !(pipelined && std::string(function) == "forward_backward"))
      return Status::error(std::string("the plan has no function ") + function);
  for (const std::string &function : names) {
    if (function == "apply_gradients" || function == "check_gradients" || function == "forward")
      continue;
    // The fused step (and its gathering copy) also reads the update's lr and step.
    bool fused = function == kFusedStep || function == std::string(kGatherPrefix) + kFusedStep;
    for (const std::string &name : executor.inputNames(function))
      if (!(fused && (name == "lr" || name == "step")) && name != "input_ids" &&
          name != "attention_mask" && name != "labels" && name != "loss_normalizer" &&
          name != "loss_scale" && name != "row_normalizer" &&
          !(name == "decoder_input_ids" && kind == passes::LossKind::seq2seq) &&
          !(pipelined && (name.starts_with("act.") || name.starts_with("grad.act.") ||
                          name.starts_with("stash."))))
        return Status::error("the model's input '" + name +
                             "' is not one megac train feeds (input_ids, "
                             "attention_mask, decoder_input_ids for encoder-decoder "
                             "models)");
  }
  if (kind == passes::LossKind::seq2seq && hasInput(executor, "decoder_input_ids")) {
    ASSIGN_OR_RETURN(runtime::TensorInfo dec, executor.inputInfo("decoder_input_ids"));
    if (dec.shape.size() != 2 || dec.shape[0] != idsShape[0] || dec.shape[1] >= idsShape[1])
      return Status::error("the model's decoder_input_ids is " + shapeString(dec.shape) +
                           "; expected [b, D] with b = " + std::to_string(idsShape[0]) +
                           " and D < S = " + std::to_string(idsShape[1]));
    idsShape[1] -= dec.shape[1];
  } else if (kind == passes::LossKind::seq2seq) {
    idsShape[1] -= decoderSeq; // a pipeline stage without the decoder still reads [b, E]
  }
  if (hasInput(executor, "input_ids")) {
    ASSIGN_OR_RETURN(runtime::TensorInfo ids, executor.inputInfo("input_ids"));
    if (ids.shape != idsShape)
      return Status::error("the model's input_ids is " + shapeString(ids.shape) +
                           "; megac train feeds [b, S] = " + shapeString(idsShape) +
                           " (--micro-batch per data-parallel rank, the data's rows)");
  }
  ASSIGN_OR_RETURN(runtime::TensorInfo lr, executor.inputInfo("lr"));
  return lr.dtype;
}

Status settleParameters(runtime::Executor &executor, RankContext &rank) {
  if (!rank.parametersPending)
    return Status::ok();
  RETURN_IF_ERROR(executor.run(kGatherParameters)) << " (gathering the parameters the last "
                                                      "update deferred)";
  rank.parametersPending = false;
  return Status::ok();
}

StatusOr<double> evaluateLoss(runtime::Executor &executor, const RunConfig &c,
                              runtime::data::SampleSource &samples, passes::LossKind kind,
                              int64_t vocab, DType floatType, train::LossScaler *scaler,
                              RankContext &rank) {
  double sum = 0;
  train::StepRecord scratch;
  for (int64_t k = 0; k < c.data.evalIters; ++k) {
    ASSIGN_OR_RETURN(double loss, batchLoss(executor, c, samples, k, kind, vocab, floatType, scaler,
                                            rank, scratch));
    sum += loss;
  }
  RETURN_IF_ERROR(executor.zeroState("grad."));
  return sum / double(c.data.evalIters);
}

/// One optimizer step (docs/training-step.md, docs/pipeline.md); fills the record's loss and
/// grad_norm. A non-finite loss stops before the update (on every rank: the loss is reduced
/// over the job first).
Status trainStep(runtime::Executor &executor, const RunConfig &c, runtime::data::SampleSource &data,
                 passes::LossKind kind, int64_t vocab, DType floatType, train::LossScaler *scaler,
                 RankContext &rank, train::StepRecord &record) {
  record.lr = c.lr.at(record.step);
  FusedUpdate update{record.lr, record.step};
  ASSIGN_OR_RETURN(double loss, batchLoss(executor, c, data, record.step - 1, kind, vocab,
                                          floatType, scaler, rank, record, &update));
  record.loss = loss;
  if (!std::isfinite(loss))
    return Status::error("the loss is " + std::string(std::isnan(loss) ? "nan" : "inf") +
                         " at step " + std::to_string(record.step) + " (lr " +
                         shortNumber(record.lr) + "); stopping " +
                         (update.ran ? "after the update (--overlap on runs it with the last "
                                       "micro-batch)"
                                     : "before the update") +
                         ". Lower --lr or clip the gradients (--clip-grad)");
  if (c.checkpoint.saveGrads && record.step == 1) {
    ASSIGN_OR_RETURN(TensorMap grads, runtime::gatherGradients(*rank.plan, executor, *rank.comm));
    if (rank.sourceShapes)
      toSourceShapes(grads, *rank.sourceShapes);
    if (rank.root() && !scaler)
      RETURN_IF_ERROR(refuseNonFiniteGradients(grads, record.step));
    if (rank.root())
      RETURN_IF_ERROR(
          runtime::writeSafetensors(*c.checkpoint.saveGrads, grads,
                                    {{"producer", "megac train"}, {"gradients_of_step", "1"}}));
  }
  if (update.ran)
    return Status::ok(); // the update ran with the last micro-batch; record.gradNorm is set
  if (scaler) {
    // Dynamic loss scaling: an overflowing step (non-finite unscaled norm) is skipped.
    RETURN_IF_ERROR(executor.run("check_gradients"));
    ASSIGN_OR_RETURN(HostTensor norm, executor.output("unscaled_grad_norm"));
    record.gradNorm = scalarValue(norm);
    bool overflow = !std::isfinite(record.gradNorm);
    scaler->update(overflow);
    if (overflow) {
      record.skipped = true;
      return Status::ok();
    }
  }
  RETURN_IF_ERROR(setUpdateInputs(executor, floatType, record.lr, record.step));
  RETURN_IF_ERROR(executor.run("apply_gradients"));
  ASSIGN_OR_RETURN(HostTensor norm, executor.output("grad_norm"));
  record.gradNorm = scalarValue(norm);
  return Status::ok();
}

} // namespace megac::driver
