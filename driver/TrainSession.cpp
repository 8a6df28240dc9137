// One rank's training run: data, compiled step, communicator, executor, pipeline run,
// evaluation, checkpoints and trace (TrainSession.h).
#include "driver/TrainSession.h"

#include "driver/CheckpointModel.h"
#include "driver/HfSave.h"
#include "driver/HfWeights.h"
#include "driver/TrainStep.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/SaveFolder.h"
#include "runtime/checkpoint/ShardState.h"
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/cuda/Device.h"
#include "runtime/exec/Parameters.h"
#include "runtime/exec/ShardGather.h"
#include "runtime/exec/Trace.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/plan_generated.h"
#include "runtime/train/LossScaler.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include <sys/resource.h>

namespace megac::driver {

namespace train = runtime::train;
using runtime::data::SampleSource;

struct TrainSession::State {
  std::unique_ptr<SampleSource> data, evalData, testData;
  std::optional<runtime::LoadedPlan> plan;
  // One communicator for the job: MPI across ranks, else the executor's one-rank view; with a
  // trace, a recording wrapper around it (over a one-rank communicator when there is no MPI).
  std::unique_ptr<runtime::comm::Communicator> mpi, self, tracing;
  std::unique_ptr<runtime::Trace> trace;
  std::unique_ptr<runtime::Executor> executor;
  RankContext rank;
  std::optional<train::LossScaler> scaler;
  DType floatType = DType::f32;
  train::LossScaler *scalerOrNull() { return scaler ? &*scaler : nullptr; }
  std::unique_ptr<runtime::checkpoint::SaveFolderLock> saveLock; // rank 0's, with --save
};

namespace {

/// "0.001", "1e+30": a number for messages.
std::string shortNumber(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", value);
  return buf;
}

} // namespace

TrainSession::TrainSession(RunConfig config, SessionHooks hooks)
    : config_(std::move(config)), hooks_(std::move(hooks)), state_(std::make_unique<State>()) {}

TrainSession::~TrainSession() = default;

int TrainSession::rank() const { return state_->rank.comm ? state_->rank.comm->rank() : 0; }
int TrainSession::ranks() const { return state_->rank.comm ? state_->rank.comm->size() : 1; }

StatusOr<std::unique_ptr<TrainSession>> TrainSession::create(RunConfig config, SessionHooks hooks) {
  auto session = std::make_unique<TrainSession>(std::move(config), std::move(hooks));
  RETURN_IF_ERROR(session->open());
  return session;
}

Status TrainSession::open() {
  RETURN_IF_ERROR(openData());
  RETURN_IF_ERROR(openRank());
  RETURN_IF_ERROR(lockSaveFolder());
  return openEvaluation();
}

/// Rank 0 holds the --save folder's lock for the session's life: a second run saving there is
/// refused (a stale lock is taken over, with a warning).
Status TrainSession::lockSaveFolder() {
  const std::optional<std::string> &dir = config_.checkpoint.saveDir;
  if (!dir || !root())
    return Status::ok();
  std::string tookOver;
  ASSIGN_OR_RETURN(state_->saveLock, runtime::checkpoint::SaveFolderLock::acquire(*dir, &tookOver));
  if (!tookOver.empty() && hooks_.warn)
    hooks_.warn(tookOver);
  return Status::ok();
}

/// The rows of --data / --data-path (an indexed dataset's are read as steps need them) and the
/// step compiled for them.
Status TrainSession::openData() {
  const RunConfig &c = config_;
  ASSIGN_OR_RETURN(state_->data, openSamples(c, DataPart::train));
  seq_ = state_->data->rowLength() - 1;
  ASSIGN_OR_RETURN(model_, compileTrainingStep(c, seq_));
  if (model_.vocab < 2)
    return Status::error("cannot find the vocabulary size (the logits' last dim) of " +
                         model_.description);
  StatusOr<runtime::LoadedPlan> plan = runtime::loadPlanFromBytes(model_.plan);
  if (!plan.isOk())
    return Status::error(plan.status().message() + " (in the plan compiled from " +
                         model_.description + ")");
  state_->plan = std::move(plan).value();
  return Status::ok();
}

namespace {

/// Whether some program of the plan runs an expert's matrix multiplication (an MoE layer).
bool hasExperts(const runtime::LoadedPlan &plan) {
  if (const auto *programs = plan.plan().programs())
    for (const auto *program : *programs)
      if (const auto *functions = program->functions())
        for (const auto *function : *functions)
          if (const auto *instructions = function->instructions())
            for (const auto *inst : *instructions)
              if (inst->op() == megac::plan::Opcode::MoeMatmul)
                return true;
  return false;
}

} // namespace

/// The job's communicator, the rank's executor and pipeline run, and the data checked against
/// the model.
Status TrainSession::openRank() {
  const RunConfig &c = config_;
  State &s = *state_;
  runtime::comm::Mesh mesh = runtime::meshOf(*s.plan);
  if (c.exec.ranks > 1) {
    if (mesh.size() != c.exec.ranks)
      return Status::error("the plan compiled from " + model_.description + " has " +
                           std::to_string(mesh.size()) + " ranks, but the job has " +
                           std::to_string(c.exec.ranks));
    if (c.exec.emulateLink.enabled() && c.exec.backend != runtime::Backend::cpu)
      return Status::error("--emulate-link applies to the CPU backend (--backend cpu)");
    ASSIGN_OR_RETURN(s.mpi, runtime::comm::MpiCommunicator::create(
                                mesh, std::chrono::seconds(c.exec.commTimeoutSeconds),
                                c.exec.emulateLink));
  }
  // Tokens in the vocabulary (a .npy's now, an indexed dataset's as read); rank 0 warns when
  // masked-LM's [MASK] token occurs in the data.
  bool root = !s.mpi || s.mpi->rank() == 0;
  if (root && hooks_.warn && c.layout().ep > 1 && !hasExperts(*s.plan))
    hooks_.warn("--ep " + std::to_string(c.layout().ep) +
                " splits the experts of "
                "mixture-of-experts layers, and " +
                model_.description +
                " has none: this run "
                "is plain data parallelism over dp = " +
                std::to_string(c.layout().dp));
  SampleChecks checks{model_.vocab, std::nullopt, root ? hooks_.warn : nullptr};
  if (model_.lossKind == passes::LossKind::mlm)
    checks.maskToken = c.data.maskTokenId.value_or(model_.vocab - 1);
  ASSIGN_OR_RETURN(s.data, checkSamples(c, DataPart::train, std::move(s.data), checks));
  if (c.log.tracePath) {
    s.trace = std::make_unique<runtime::Trace>();
    if (!s.mpi)
      s.self = runtime::comm::makeSelfCommunicator(mesh);
    s.tracing = runtime::makeTracingCommunicator(s.mpi ? *s.mpi : *s.self, *s.trace);
  }
  runtime::ExecutorOptions options;
  if (!model_.weights.empty())
    options.weights = &model_.weights;
  options.comm = s.tracing ? s.tracing.get() : s.mpi.get();
  options.trace = s.trace.get();
  options.backend = c.exec.backend;
  options.allowTf32 = c.exec.allowTf32;
  options.commTimeout = std::chrono::seconds(c.exec.commTimeoutSeconds);
  s.rank.comm = s.mpi.get(); // from here on, a failing rank aborts the job
  s.rank.plan = &*s.plan;
  s.rank.decoderSeq = model_.decoderSeq;
  s.rank.modelDescription = model_.description;
  s.rank.sourceShapes = &model_.sourceShapes;
  ASSIGN_OR_RETURN(s.executor, runtime::Executor::create(*s.plan, options));
  // The initial weights of an hf: folder that has them: each rank reads its own shards.
  if (std::string file = hfWeightsFile(c.model); !file.empty()) {
    ASSIGN_OR_RETURN(HfCheckpoint hf, HfCheckpoint::open(file));
    RETURN_IF_ERROR(loadHfWeights(hf, *s.plan, *s.executor, model_.sourceShapes,
                                  c.checkpoint.allowMissing));
  }
  s.rank.comm = &s.executor->communicator();
  s.rank.trace = s.trace.get();
  std::vector<int64_t> coords = s.executor->coords();
  // The data-parallel index over every rank that reads its own rows: dp, and within it ep.
  int64_t dpCoord = 0, epCoord = 0, epSize = 1;
  for (size_t a = 0; a < mesh.axisNames.size(); ++a) {
    if (mesh.axisNames[a] == "dp")
      dpCoord = coords[a];
    if (mesh.axisNames[a] == "ep") {
      epCoord = coords[a];
      epSize = mesh.axisSizes[a];
    }
    if (mesh.axisNames[a] == "pp" && mesh.axisSizes[a] > 1)
      s.rank.ppAxis = int64_t(a);
  }
  s.rank.dpRank = dpCoord * epSize + epCoord;
  if (!s.executor->schedule().empty()) {
    ASSIGN_OR_RETURN(s.rank.pipeline, train::pipelineRunForRank(*s.plan, s.executor->rank()));
    s.rank.pipeline->trace = s.trace.get();
    // --overlap on: each step's receives are posted ahead of it (docs/training-step.md).
    s.rank.pipeline->postReceivesEarly = c.training.overlap;
    // The schedule must cover every micro-batch of the step's data.
    int64_t want = c.layout().microBatches, forwards = 0;
    for (const schedule::ScheduleStep &step : s.rank.pipeline->steps)
      forwards += step.kind == schedule::StepKind::forward;
    if (s.rank.pipeline->microBatches != want)
      return Status::error("the plan's pipeline schedule runs " +
                           std::to_string(s.rank.pipeline->microBatches) + " micro-batches (" +
                           std::to_string(forwards) +
                           " forward steps on this stage), but a step has " + std::to_string(want) +
                           " (--global-batch / (--micro-batch x dp))");
  }
  ASSIGN_OR_RETURN(s.floatType, checkInputs(*s.executor, {c.layout().microBatch, seq_},
                                            model_.lossKind, model_.decoderSeq));
  if (c.layout().precision == Precision::fp16)
    s.scaler.emplace(c.scaler);
  return Status::ok();
}

namespace {

/// This process's peak resident set in bytes (Linux's ru_maxrss is in KiB; /proc's VmHWM).
int64_t peakRssBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return int64_t(usage.ru_maxrss) * 1024;
}

} // namespace

/// Validation (--eval-data, else --split's validation part) and --split's test part.
Status TrainSession::openEvaluation() {
  const RunConfig &c = config_;
  SampleChecks checks{model_.vocab, std::nullopt, nullptr};
  if (model_.lossKind == passes::LossKind::mlm)
    checks.maskToken = c.data.maskTokenId.value_or(model_.vocab - 1);
  for (auto [part, out] :
       {std::pair{DataPart::validation, &state_->evalData}, {DataPart::test, &state_->testData}}) {
    if (!evaluates(part))
      continue;
    ASSIGN_OR_RETURN(std::unique_ptr<SampleSource> samples, openSamples(c, part));
    if (samples->rowLength() != seq_ + 1)
      return Status::error("--eval-data: rows of " + std::to_string(samples->rowLength()) +
                           " tokens, but the training data's have " + std::to_string(seq_ + 1));
    ASSIGN_OR_RETURN(*out, checkSamples(c, part, std::move(samples), checks));
  }
  return Status::ok();
}

bool TrainSession::evaluates(DataPart part) const {
  const DataConfig &d = config_.data;
  if (part == DataPart::validation)
    return d.evalPath || (d.split && d.evalInterval > 0);
  return part == DataPart::test && d.split && (*d.split)[2] > 0;
}

StatusOr<train::StepRecord> TrainSession::step() { return stepOn(*state_->data); }

namespace {

/// A global batch given by the caller, as the samples of the step that reads it: sample
/// `first` + j is row j.
class GivenBatch final : public SampleSource {
public:
  GivenBatch(std::span<const int64_t> tokens, int64_t rows, int64_t rowLength, int64_t first,
             int64_t step)
      : tokens_(tokens), rows_(rows), rowLength_(rowLength), first_(first), step_(step) {}
  int64_t rowLength() const override { return rowLength_; }
  Status read(int64_t i, std::span<int64_t> out) override {
    int64_t row = i - first_;
    if (row < 0 || row >= rows_ || int64_t(out.size()) != rowLength_)
      return Status::error("step " + std::to_string(step_) + " read sample " + std::to_string(i) +
                           ", outside the batch it was given");
    std::copy_n(tokens_.begin() + row * rowLength_, rowLength_, out.begin());
    return Status::ok();
  }
  std::string describe(int64_t i) override {
    return "row " + std::to_string(i - first_) + " of the batch given to step " +
           std::to_string(step_);
  }

private:
  std::span<const int64_t> tokens_;
  int64_t rows_, rowLength_, first_, step_;
};

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text;
  for (int64_t d : shape)
    text += (text.empty() ? "" : ", ") + std::to_string(d);
  return "[" + text + "]";
}

} // namespace

StatusOr<train::StepRecord> TrainSession::step(std::span<const int64_t> tokens,
                                               const std::vector<int64_t> &shape) {
  const RunConfig &c = config_;
  int64_t rows = c.data.batch.globalBatch, length = seq_ + 1;
  if (shape.size() != 2 || shape[0] != rows || shape[1] != length)
    return Status::error("the batch given to step " + std::to_string(stepsDone_ + 1) +
                         " has shape " + shapeText(shape) +
                         "; a step takes [global batch, S + 1] = " + shapeText({rows, length}) +
                         " tokens");
  if (int64_t(tokens.size()) != rows * length)
    return Status::error("the batch given to step " + std::to_string(stepsDone_ + 1) + " holds " +
                         std::to_string(tokens.size()) + " tokens, not " +
                         std::to_string(rows * length) + " (shape " + shapeText(shape) + ")");
  // Every token in [0, vocab), as the configured data's are checked.
  for (size_t t = 0; t < tokens.size(); ++t)
    if (tokens[t] < 0 || tokens[t] >= model_.vocab)
      return Status::error(
          "token " + std::to_string(tokens[t]) + " at row " + std::to_string(int64_t(t) / length) +
          ", position " + std::to_string(int64_t(t) % length) + " of the batch given to step " +
          std::to_string(stepsDone_ + 1) + " is outside the model's vocabulary [0, " +
          std::to_string(model_.vocab) + ")");
  GivenBatch batch(tokens, rows, length, stepsDone_ * rows, stepsDone_ + 1);
  return stepOn(batch);
}

StatusOr<train::StepRecord> TrainSession::stepOn(SampleSource &data) {
  State &s = *state_;
  const RunConfig &c = config_;
  train::StepRecord record;
  record.step = stepsDone_ + 1;
  record.tokens = c.data.batch.globalBatch * seq_;
  record.flopsPerToken = model_.trainingFlopsPerToken;
  record.ranks = ranks();
  // The dense bf16 peak is the peak of bf16 and fp16 steps only; fp32 and fp64 runs (and CPU
  // ranks, whose peak megac does not know) log no MFU.
  Precision precision = c.layout().precision;
  if (c.exec.backend == runtime::Backend::cuda &&
      (precision == Precision::bf16 || precision == Precision::fp16))
    record.peakFlopsPerRank = runtime::cuda::peakBf16Flops(0);
  record.memPlanBytes = int64_t(s.executor->arenaBytes());
  bool traced = s.trace && record.step >= c.log.traceFirst && record.step <= c.log.traceLast;
  if (traced && record.step == c.log.traceFirst) { // the ranks start their clocks together
    RETURN_IF_ERROR(s.rank.comm->barrier()) << " (before the traced steps)";
    s.trace->start();
  }
  auto start = std::chrono::steady_clock::now();
  Status status = trainStep(*s.executor, c, data, model_.lossKind, model_.vocab, s.floatType,
                            s.scalerOrNull(), s.rank, record);
  if (traced) {
    s.trace->add(runtime::TraceLane::pipeline, "step " + std::to_string(record.step), "step", start,
                 std::chrono::steady_clock::now(), "\"step\": " + std::to_string(record.step));
    if (record.step == c.log.traceLast)
      s.trace->stop();
  }
  RETURN_IF_ERROR(status);
  record.stepSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  record.memRssPeakBytes = peakRssBytes();
  stepsDone_ = record.step;
  return record;
}

StatusOr<double> TrainSession::evaluate(DataPart part) {
  State &s = *state_;
  SampleSource *samples = part == DataPart::test ? s.testData.get() : s.evalData.get();
  const char *what = part == DataPart::test ? "test" : "validation";
  if (!samples)
    return Status::error(std::string("this run has no ") + what + " data");
  StatusOr<double> loss = evaluateLoss(*s.executor, config_, *samples, model_.lossKind,
                                       model_.vocab, s.floatType, s.scalerOrNull(), s.rank);
  if (!loss.isOk())
    return Status::error(loss.status().message() + " (" + what + " after step " +
                         std::to_string(stepsDone_) + ")");
  return loss;
}

Status TrainSession::save() {
  namespace ckpt = runtime::checkpoint;
  State &s = *state_;
  const RunConfig &c = config_;
  if (!c.checkpoint.saveDir)
    return Status::error("the run has no checkpoint directory (--save DIR)");
  // A checkpoint holds the parameters themselves: gather what the last update deferred (the
  // pending shards are not checkpointed).
  RETURN_IF_ERROR(settleParameters(*s.executor, s.rank));
  ckpt::CheckpointMeta meta;
  meta.step = stepsDone_;
  meta.dataPosition = stepsDone_;
  meta.seed = c.seed;
  meta.model = model_.description;
  meta.layout = c.layout().describe();
  meta.fingerprint = model_.fingerprint;
  if (s.scaler)
    meta.lossScaler = ckpt::LossScalerState{s.scaler->scale(), s.scaler->growthTracker(),
                                            s.scaler->hysteresisTracker()};
  meta.config = {{"precision", precisionName(c.layout().precision)},
                 {"global_batch", std::to_string(c.data.batch.globalBatch)},
                 {"lr", shortNumber(c.lr.lr)},
                 {"lr_schedule", train::lrDecayName(c.lr.decay)},
                 {"total_steps", std::to_string(c.lr.totalSteps)},
                 {"data", c.data.path}};
  // An ONNX model's file and bound input: what `megac generate` / `megac export` rebuild it from
  // (rank 0 writes meta.json; it holds input_ids, the first pipeline stage's input).
  if (root())
    meta.config.merge(
        recordOnnxModel(c.model.file() ? std::optional(*c.model.file()) : std::nullopt, *s.executor,
                        c.training.logits));
  RETURN_IF_ERROR(
      ckpt::saveShardedCheckpoint(*s.executor, *s.rank.comm, *c.checkpoint.saveDir, meta));
  if (root()) { // a folder that cannot be tidied still holds a good checkpoint: warn only
    StatusOr<std::vector<std::string>> pruned = ckpt::pruneSaveFolder(
        *c.checkpoint.saveDir, {c.checkpoint.keepLast, c.checkpoint.keepSteps});
    if (!pruned.isOk() && hooks_.warn)
      hooks_.warn(pruned.status().message());
  }
  return Status::ok();
}

StatusOr<train::StopDecision> TrainSession::agreeToStop(const train::StopRequest &request) {
  return request.agree(*state_->rank.comm);
}

std::string TrainSession::savedPath() const {
  return runtime::checkpoint::stepPath(config_.checkpoint.saveDir.value_or(""), stepsDone_);
}

StatusOr<Resumed> TrainSession::load() {
  if (!config_.checkpoint.loadDir)
    return Status::error("the run has no checkpoint to load (--load DIR)");
  return load(*config_.checkpoint.loadDir);
}

StatusOr<Resumed> TrainSession::load(const std::string &dir) {
  namespace ckpt = runtime::checkpoint;
  State &s = *state_;
  const RunConfig &c = config_;
  std::vector<std::string> refused;
  bool parametersOnly = c.checkpoint.finetune || c.checkpoint.noLoadOptim;
  StatusOr<ckpt::LoadedCheckpoint> loaded = ckpt::loadShardedCheckpoint(
      *s.executor, *s.rank.comm, dir, &refused,
      parametersOnly ? ckpt::CheckpointParts::parametersOnly : ckpt::CheckpointParts::all);
  for (const std::string &line : refused)
    if (hooks_.warn)
      hooks_.warn(line);
  if (!loaded.isOk())
    return Status::error("--load: " + loaded.status().message());
  // The loaded parameters are whole; nothing an earlier update deferred may overwrite them.
  s.rank.parametersPending = false;
  const ckpt::CheckpointMeta &meta = loaded->meta;
  // Another model whose tensors happen to fit (a 2-layer checkpoint in a 1-layer model, heads 2
  // in heads 4) is refused, naming what differs; checkpoints of older megac have no fingerprint.
  if (meta.fingerprint)
    if (std::string why = ckpt::fingerprintMismatch(*meta.fingerprint, model_.fingerprint);
        !why.empty())
      return Status::error("--load: " + loaded->path + ": " + why);
  if (c.checkpoint.finetune) { // the parameters only: step 0, a fresh scaler and optimizer
    stepsDone_ = 0;
    return Resumed{loaded->path, 0, meta.layout};
  }
  if (root() && hooks_.warn && !c.checkpoint.noLoadRng && meta.seed != c.seed)
    hooks_.warn(loaded->path + " was saved by a run with --seed " + std::to_string(meta.seed) +
                "; this run's dropout and sampling follow --seed " + std::to_string(c.seed) +
                " (give --seed " + std::to_string(meta.seed) +
                " to continue that run exactly, or --no-load-rng)");
  if (s.scaler && meta.lossScaler)
    s.scaler->restore(meta.lossScaler->scale, meta.lossScaler->growthTracker,
                      meta.lossScaler->hysteresisTracker);
  if (root() && hooks_.warn) {
    // Settings that change what the resumed steps compute (not the layout, which may differ; a
    // different model fails above, on its parameters' shapes).
    std::map<std::string, std::string> now = {
        {"global_batch", std::to_string(c.data.batch.globalBatch)},
        {"data", c.data.path},
        {"precision", precisionName(c.layout().precision)}};
    for (const auto &[key, value] : now)
      if (auto it = meta.config.find(key); it != meta.config.end() && it->second != value)
        hooks_.warn(loaded->path + " was saved with " + key + " " + it->second + "; this run has " +
                    value);
  }
  stepsDone_ = meta.step;
  return Resumed{loaded->path, meta.step, meta.layout};
}

StatusOr<TensorMap> TrainSession::parameters() {
  State &s = *state_;
  RETURN_IF_ERROR(settleParameters(*s.executor, s.rank));
  ASSIGN_OR_RETURN(TensorMap weights,
                   runtime::gatherParameters(*s.plan, *s.executor, *s.rank.comm));
  if (root())
    toSourceShapes(weights, model_.sourceShapes);
  return weights;
}

Status TrainSession::saveWeights(const std::string &path) {
  ASSIGN_OR_RETURN(TensorMap weights, parameters());
  if (!root())
    return Status::ok();
  return runtime::writeSafetensors(
      path, weights,
      {{"producer", "megac train"}, {"step", std::to_string(config_.lr.totalSteps)}});
}

Status TrainSession::saveHf(const std::string &dir) {
  State &s = *state_;
  RETURN_IF_ERROR(settleParameters(*s.executor, s.rank));
  // Shard by shard: rank 0 gathers one output shard's parameters at a time, never the model.
  std::map<std::string, std::vector<int64_t>> params;
  for (const megac::plan::Program *program : *s.plan->plan().programs())
    if (program->parameters())
      for (const megac::plan::Parameter *p : *program->parameters())
        params.emplace(p->name()->str(), std::vector<int64_t>(p->global_shape()->begin(),
                                                              p->global_shape()->end()));
  auto fetch = [&](const std::vector<std::string> &names) -> StatusOr<TensorMap> {
    ASSIGN_OR_RETURN(TensorMap weights,
                     runtime::gatherParameters(*s.plan, *s.executor, *s.rank.comm,
                                               std::set<std::string>(names.begin(), names.end())));
    if (root())
      toSourceShapes(weights, model_.sourceShapes);
    return weights;
  };
  return saveHfFolder(dir, params, model_.sourceShapes, fetch,
                      {hfFolder(config_.model), config_.checkpoint.hfShardBytes,
                       {{"producer", "megac train"}, {"step", std::to_string(stepsDone_)}}},
                      root());
}

Status TrainSession::writeTrace() {
  State &s = *state_;
  const RunConfig &c = config_;
  if (!s.trace)
    return Status::error("the run records no trace (--trace FILE.json)");
  const runtime::comm::Mesh &mesh = s.rank.comm->mesh();
  std::string name = "rank " + std::to_string(s.rank.comm->rank());
  std::vector<int64_t> coords = mesh.coordsOf(s.rank.comm->rank());
  for (size_t a = 0; a < mesh.axisNames.size() && a < coords.size(); ++a)
    name += (a ? ", " : " (") + mesh.axisNames[a] + " " + std::to_string(coords[a]) +
            (a + 1 == mesh.axisNames.size() ? ")" : "");
  const Layout &l = c.layout();
  std::string other = "\"traced_steps\": [" + std::to_string(c.log.traceFirst) + ", " +
                      std::to_string(c.log.traceLast) + "], \"tp\": " + std::to_string(l.tp) +
                      ", \"pp\": " + std::to_string(l.pp) + ", \"dp\": " + std::to_string(l.dp) +
                      ", \"vpp\": " + std::to_string(l.vpp) +
                      ", \"micro_batches\": " + std::to_string(l.microBatches) +
                      ", \"schedule\": \"" +
                      (l.pp > 1 ? schedule::scheduleName(l.schedule) : "none") + "\"";
  return runtime::writeGatheredTrace(*s.rank.comm, *s.trace, {name, s.executor->arenaBytes()},
                                     *c.log.tracePath, other);
}

} // namespace megac::driver
