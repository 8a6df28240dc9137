// `megac train (MODEL.onnx | FILE.mlir | --model SPEC) --data TOKENS.npy ...`: AdamW training on
// one or more CPU ranks, driving the plan's @forward_backward (or, pipelined, its scheduled chunk
// functions) and @apply_gradients (docs/training-step.md, docs/pipeline.md). Several ranks run
// under mpirun (`--ranks N` starts it), one process per rank of the mesh <pp, dp, tp>.
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Compile.h"
#include "tools/megac/ModelSource.h"
#include "tools/megac/PlanExplain.h"
#include "tools/megac/TrainCompile.h"
#include "tools/megac/TrainData.h"
#include "tools/megac/TrainOptions.h"
#include "tools/megac/TrainStep.h"

#include "frontends/models/ModelConfig.h"
#include "ir/MegaDialect.h"
#include "passes/Pipelines.h"
#include "passes/training/TrainingPipeline.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/ShardState.h"
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Parameters.h"
#include "runtime/exec/ShardGather.h"
#include "runtime/exec/Trace.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/train/LossScaler.h"
#include "runtime/train/LrSchedule.h"
#include "runtime/train/PipelineRunner.h"
#include "runtime/train/TokenBatches.h"
#include "runtime/train/TrainLog.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <unistd.h>

namespace megac::cli {

namespace {

namespace train = runtime::train;
constexpr const char *kCommand = "megac train";

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// "0.001", "1e+30": a number for messages.
std::string shortNumber(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", value);
  return buf;
}

/// Every parameter, whole (gathered on rank 0), in the layout of a one-rank run.
Status saveWeights(const runtime::Executor &executor, RankContext &rank, const std::string &path,
                   int64_t steps) {
  ASSIGN_OR_RETURN(TensorMap weights, runtime::gatherParameters(*rank.plan, executor, *rank.comm));
  if (!rank.root())
    return Status::ok();
  return runtime::writeSafetensors(path, weights,
                                   {{"producer", "megac train"}, {"step", std::to_string(steps)}});
}

/// The layout of this run, as checkpoints record it.
std::string layoutString(const TrainConfig &c) {
  const Layout &l = c.training.layout;
  return "tp " + std::to_string(l.tp) + ", pp " + std::to_string(l.pp) + ", dp " +
         std::to_string(l.dp) + ", vpp " + std::to_string(l.vpp) + ", zero " +
         std::to_string(l.zero) + (l.sequenceParallel ? ", sequence parallel" : "");
}

/// --save: every rank writes its shards to DIR/step-<step>; rank 0 completes it (meta.json).
Status saveCheckpoint(const runtime::Executor &executor, const TrainConfig &c, RankContext &rank,
                      const train::LossScaler *scaler, int64_t step) {
  namespace ckpt = runtime::checkpoint;
  ckpt::CheckpointMeta meta;
  meta.step = step;
  meta.dataPosition = step;
  meta.seed = c.seed;
  meta.model = rank.modelDescription;
  meta.layout = layoutString(c);
  if (scaler)
    meta.lossScaler = ckpt::LossScalerState{scaler->scale(), scaler->growthTracker(),
                                            scaler->hysteresisTracker()};
  meta.config = {{"precision", precisionName(c.training.layout.precision)},
                 {"global_batch", std::to_string(c.split.globalBatch)},
                 {"lr", shortNumber(c.schedule.lr)},
                 {"lr_schedule", train::lrDecayName(c.schedule.decay)},
                 {"total_steps", std::to_string(c.schedule.totalSteps)},
                 {"data", c.dataPath}};
  // An ONNX model's file and bound input: what `megac generate` / `megac export` rebuild it from
  // (rank 0 writes meta.json; it holds input_ids, the first pipeline stage's input).
  if (rank.root())
    meta.config.merge(recordOnnxModel(c.file, executor, c.training.logits));
  return ckpt::saveShardedCheckpoint(executor, *rank.comm, *c.saveDir, meta);
}

/// --load: every rank sets its shards from DIR's newest usable checkpoint (reading only the boxes
/// it needs); returns the checkpoint's step (the steps done).
StatusOr<int64_t> loadCheckpoint(runtime::Executor &executor, const TrainConfig &c,
                                 RankContext &rank, train::LossScaler *scaler) {
  namespace ckpt = runtime::checkpoint;
  std::vector<std::string> refused;
  StatusOr<ckpt::LoadedCheckpoint> loaded =
      ckpt::loadShardedCheckpoint(executor, *rank.comm, *c.loadDir, &refused);
  for (const std::string &line : refused)
    std::fprintf(stderr, "%s: warning: %s\n", kCommand, line.c_str());
  if (!loaded.isOk())
    return Status::error("--load: " + loaded.status().message());
  const ckpt::LoadedCheckpoint &checkpoint = *loaded;
  if (scaler && checkpoint.meta.lossScaler)
    scaler->restore(checkpoint.meta.lossScaler->scale, checkpoint.meta.lossScaler->growthTracker,
                    checkpoint.meta.lossScaler->hysteresisTracker);
  if (rank.root()) {
    // Settings that change what the resumed steps compute (not the layout, which may differ; a
    // different model fails above, on its parameters' shapes).
    std::map<std::string, std::string> now = {
        {"global_batch", std::to_string(c.split.globalBatch)},
        {"data", c.dataPath},
        {"precision", precisionName(c.training.layout.precision)}};
    for (const auto &[key, value] : now)
      if (auto it = checkpoint.meta.config.find(key);
          it != checkpoint.meta.config.end() && it->second != value)
        std::fprintf(stderr, "%s: warning: %s was saved with %s %s; this run has %s\n", kCommand,
                     checkpoint.path.c_str(), key.c_str(), it->second.c_str(), value.c_str());
    std::printf("resumed from %s (step %lld, saved under %s)\n", checkpoint.path.c_str(),
                (long long)checkpoint.meta.step, checkpoint.meta.layout.c_str());
    std::fflush(stdout);
  }
  return checkpoint.meta.step;
}

/// --trace: every rank's recorded events to rank 0, which writes the Chrome trace.
Status writeTrace(const runtime::Executor &executor, const TrainConfig &c, RankContext &rank) {
  const runtime::comm::Mesh &mesh = rank.comm->mesh();
  std::string name = "rank " + std::to_string(rank.comm->rank());
  std::vector<int64_t> coords = mesh.coordsOf(rank.comm->rank());
  for (size_t a = 0; a < mesh.axisNames.size() && a < coords.size(); ++a)
    name += (a ? ", " : " (") + mesh.axisNames[a] + " " + std::to_string(coords[a]) +
            (a + 1 == mesh.axisNames.size() ? ")" : "");
  const Layout &layout = c.training.layout;
  std::string other =
      "\"traced_steps\": [" + std::to_string(c.traceFirst) + ", " + std::to_string(c.traceLast) +
      "], \"tp\": " + std::to_string(layout.tp) + ", \"pp\": " + std::to_string(layout.pp) +
      ", \"dp\": " + std::to_string(layout.dp) + ", \"vpp\": " + std::to_string(layout.vpp) +
      ", \"micro_batches\": " + std::to_string(layout.microBatches) + ", \"schedule\": \"" +
      (layout.pp > 1 ? schedule::scheduleName(layout.schedule) : "none") + "\"";
  return runtime::writeGatheredTrace(*rank.comm, *rank.trace, {name, executor.arenaBytes()},
                                     *c.tracePath, other);
}

/// The ranks of a multi-rank job abort together: one failing rank would leave the others
/// waiting in a collective until the timeout.
int fail(const std::string &message, const RankContext *rank = nullptr) {
  bool multi = rank && rank->comm && rank->comm->size() > 1;
  if (multi)
    std::fprintf(stderr, "%s: error: rank %d: %s\n", kCommand, rank->comm->rank(), message.c_str());
  else
    std::fprintf(stderr, "%s: error: %s\n", kCommand, message.c_str());
  std::fflush(stderr);
  if (multi)
    runtime::comm::MpiCommunicator::abortJob(1);
  return 1;
}

/// The training loop: steps, logs, progress (rank 0); returns the exit code.
int trainLoop(runtime::Executor &executor, const TrainConfig &c, runtime::data::SampleSource &data,
              runtime::data::SampleSource *evalData, runtime::data::SampleSource *testData,
              passes::LossKind kind, int64_t vocab, DType floatType, RankContext &rank) {
  std::optional<train::LossScaler> scaler;
  if (c.training.layout.precision == Precision::fp16)
    scaler.emplace(c.scaler);
  bool root = rank.root();
  train::JsonLinesWriter log;
  if (c.logJson && root)
    if (Status s = log.open(*c.logJson); !s.isOk())
      return fail(s.message(), &rank);
  bool terminal = root && stdoutIsTerminal();
  int64_t steps = c.schedule.totalSteps;
  int64_t done = 0; // steps of a checkpoint resumed from (--load)
  if (c.loadDir) {
    StatusOr<int64_t> resumed = loadCheckpoint(executor, c, rank, scaler ? &*scaler : nullptr);
    if (!resumed.isOk())
      return fail(resumed.status().message(), &rank);
    done = *resumed;
  }
  double elapsed = 0, firstLoss = 0, lastLoss = 0;
  train::LogInterval interval;
  for (int64_t step = done + 1; step <= steps; ++step) {
    train::StepRecord record;
    record.step = step;
    record.tokens = c.split.globalBatch * (data.rowLength() - 1);
    bool traced = rank.trace && step >= c.traceFirst && step <= c.traceLast;
    if (traced && step == c.traceFirst) { // the ranks start their clocks together
      if (Status s = rank.comm->barrier(); !s.isOk())
        return fail(s.message() + " (before the traced steps)", &rank);
      rank.trace->start();
    }
    auto start = std::chrono::steady_clock::now();
    Status status = trainStep(executor, c, data, kind, vocab, floatType,
                              scaler ? &*scaler : nullptr, rank, record);
    if (traced) {
      rank.trace->add(runtime::TraceLane::pipeline, "step " + std::to_string(step), "step", start,
                      std::chrono::steady_clock::now(), "\"step\": " + std::to_string(step));
      if (step == c.traceLast)
        rank.trace->stop();
    }
    if (!status.isOk()) {
      if (terminal)
        std::fputc('\n', stdout);
      std::fflush(stdout);
      return fail(status.message(), &rank);
    }
    record.stepSeconds = secondsSince(start);
    elapsed += record.stepSeconds;
    if (step == done + 1)
      firstLoss = record.loss;
    lastLoss = record.loss;
    if (evalData && (step % c.evalInterval == 0 || step == steps)) {
      if (terminal)
        std::fputc('\n', stdout);
      if (Status s =
              evaluate(executor, c, *evalData, kind, vocab, floatType, scaler ? &*scaler : nullptr,
                       rank, step, "validation", "val", c.logJson && root ? &log : nullptr);
          !s.isOk())
        return fail(s.message(), &rank);
    }
    if (c.saveDir && (step == steps || (c.saveInterval > 0 && step % c.saveInterval == 0))) {
      if (Status s = saveCheckpoint(executor, c, rank, scaler ? &*scaler : nullptr, step);
          !s.isOk())
        return fail(s.message(), &rank);
    }
    if (!root)
      continue;
    if (c.logJson)
      if (Status s = log.write(train::stepRecordJson(record)); !s.isOk())
        return fail(s.message(), &rank);
    if (terminal) {
      double eta = elapsed / double(step - done) * double(steps - step);
      std::printf("\r%s\x1b[K", train::progressLine(record, steps, eta).c_str());
    } else if (std::optional<train::StepRecord> line = interval.add(record, c.logInterval, steps)) {
      std::printf("%s\n", train::stepLogLine(*line, steps).c_str());
    }
    std::fflush(stdout);
  }
  if (terminal)
    std::fputc('\n', stdout);
  if (testData)
    if (Status s =
            evaluate(executor, c, *testData, kind, vocab, floatType, scaler ? &*scaler : nullptr,
                     rank, steps, "test", "test", c.logJson && root ? &log : nullptr);
        !s.isOk())
      return fail(s.message(), &rank);
  if (root) {
    if (Status s = log.close(); !s.isOk())
      return fail(s.message(), &rank);
    int64_t ran = steps - std::min(done, steps);
    std::printf("trained %lld steps in %s (%.0f tokens/s): loss %.6g -> %.6g\n", (long long)ran,
                train::formatDuration(elapsed).c_str(),
                elapsed > 0 ? c.split.globalBatch * (data.rowLength() - 1) * ran / elapsed : 0.0,
                firstLoss, lastLoss);
    if (c.saveDir && ran > 0)
      std::printf("saved checkpoints in %s (latest: step %lld)\n", c.saveDir->c_str(),
                  (long long)steps);
  }
  if (rank.trace) {
    if (Status s = writeTrace(executor, c, rank); !s.isOk())
      return fail(s.message(), &rank);
    if (root)
      std::printf("wrote %s (the timeline of steps %lld..%lld)\n", c.tracePath->c_str(),
                  (long long)c.traceFirst, (long long)c.traceLast);
  }
  if (c.saveWeights) {
    if (Status s = saveWeights(executor, rank, *c.saveWeights, steps); !s.isOk())
      return fail(s.message(), &rank);
    if (root)
      std::printf("wrote %s\n", c.saveWeights->c_str());
  }
  if (c.saveGrads && root)
    std::printf("wrote %s (the gradients of step 1)\n", c.saveGrads->c_str());
  std::fflush(stdout);
  return 0;
}

} // namespace

/// `megac plan` and `megac compile` with a layout: the plan of every rank, compiled in this
/// process; reported (--explain, --json) and/or written (--plan-out), never run.
int planOnly(const TrainConfig &config) {
  int64_t seq = 0;
  if (!config.dataPath.empty()) {
    StatusOr<int64_t> length = trainingSequenceLength(config);
    if (!length.isOk())
      return fail(length.status().message());
    seq = *length;
  } else if (config.spec) {
    models::ConfigResult parsed = models::parseModelSpec(*config.spec);
    if (!parsed.config)
      return fail("--model: " + parsed.error);
    seq =
        parsed.config->seq + (parsed.config->arch == models::Arch::t5 ? parsed.config->decSeq : 0);
  } else {
    return fail("a model file needs --data TOKENS.npy (its rows give the sequence length)");
  }
  std::optional<TrainModel> model = compileTrainingStep(config, seq);
  if (!model)
    return 1;
  auto plan = runtime::loadPlanFromBytes(model->plan);
  if (!plan.isOk())
    return fail(plan.status().message() + " (in the plan compiled from " + model->description +
                ")");
  if (config.planOut) {
    std::ofstream out(*config.planOut, std::ios::binary);
    out.write(reinterpret_cast<const char *>(model->plan.data()),
              static_cast<std::streamsize>(model->plan.size()));
    if (!out)
      return fail("cannot write " + *config.planOut);
  }
  if (config.explainJson)
    std::fputs(explainPlanJson(*plan).c_str(), stdout);
  else if (config.explain || !config.planOut)
    std::fputs(explainPlan(*plan).c_str(), stdout);
  return 0;
}

int trainCommand(int argc, char **argv) {
  // Layouts not implemented are refused, never ignored.
  for (int i = 2; i < argc; ++i)
    for (const char *flag : {"--cp", "--ep", "--fp8"})
      if (std::strcmp(argv[i], flag) == 0 ||
          std::string_view(argv[i]).starts_with(std::string(flag) + "=")) {
        std::fprintf(stderr, "%s: %s is not supported yet\n", kCommand, flag);
        return 2;
      }
  Args args;
  const std::set<std::string> valued = {"model",
                                        "data",
                                        "steps",
                                        "global-batch",
                                        "micro-batch",
                                        "lr",
                                        "lr-schedule",
                                        "warmup-steps",
                                        "min-lr",
                                        "adam-beta1",
                                        "adam-beta2",
                                        "adam-eps",
                                        "weight-decay",
                                        "clip-grad",
                                        "seed",
                                        "precision",
                                        "initial-loss-scale",
                                        "loss-scale-window",
                                        "hysteresis",
                                        "min-loss-scale",
                                        "log-json",
                                        "log-interval",
                                        "logits",
                                        "save-weights",
                                        "save-grads",
                                        "save",
                                        "save-interval",
                                        "load",
                                        "ranks",
                                        "tp",
                                        "pp",
                                        "dp",
                                        "vpp",
                                        "zero",
                                        "recompute",
                                        "schedule",
                                        "threads",
                                        "comm-timeout",
                                        "plan-out",
                                        "eval-data",
                                        "eval-interval",
                                        "eval-iters",
                                        "trace",
                                        "trace-steps",
                                        "seq",
                                        "backend",
                                        "split"};
  std::string error = args.parse(
      argc, argv, 2, valued,
      {"help", "sequence-parallel", "oversubscribe", "plan-only", "explain", "json", "allow-tf32"},
      {"data-path"});
  if (args.has("help")) {
    std::puts(kTrainHelp);
    return 0;
  }
  TrainConfig config;
  if (error.empty())
    error = parseTrainArgs(args, config);
  if (!error.empty()) {
    // `megac plan` and `megac compile --ranks` run this parser in plan mode.
    std::fprintf(stderr, "%s: error: %s\n", args.has("plan-only") ? "megac plan" : kCommand,
                 error.c_str());
    return 2;
  }
  if (config.planOnly)
    return planOnly(config);
  if (config.ranks > 1 && launchedRanks() <= 1)
    return relaunchUnderMpirun(argc, argv, config);
  setThreads(config);

  // The rows of --data / --data-path (an indexed dataset's are read as steps need them).
  StatusOr<std::unique_ptr<runtime::data::SampleSource>> opened =
      openSamples(config, DataPart::train);
  if (!opened.isOk())
    return fail(opened.status().message());
  std::unique_ptr<runtime::data::SampleSource> data = std::move(opened).value();
  int64_t seq = data->rowLength() - 1;
  std::optional<TrainModel> model = compileTrainingStep(config, seq);
  if (!model)
    return 1;
  passes::LossKind kind = model->lossKind;
  if (model->vocab < 2)
    return fail("cannot find the vocabulary size (the logits' last dim) of " + model->description);
  auto plan = runtime::loadPlanFromBytes(model->plan);
  if (!plan.isOk())
    return fail(plan.status().message() + " (in the plan compiled from " + model->description +
                ")");

  // One communicator for the job: MPI across ranks, else the executor's one-rank view.
  std::unique_ptr<runtime::comm::Communicator> mpi;
  runtime::comm::Mesh mesh = runtime::meshOf(*plan);
  if (config.ranks > 1) {
    if (mesh.size() != config.ranks)
      return fail("the plan compiled from " + model->description + " has " +
                  std::to_string(mesh.size()) + " ranks, but the job has " +
                  std::to_string(config.ranks));
    auto made =
        runtime::comm::MpiCommunicator::create(mesh, std::chrono::seconds(config.commTimeout));
    if (!made.isOk())
      return fail(made.status().message());
    mpi = std::move(made).value();
  }
  bool root = !mpi || mpi->rank() == 0;
  // Tokens in the vocabulary (a .npy's now, an indexed dataset's as read); rank 0 warns when
  // masked-LM's [MASK] token occurs in the data.
  SampleChecks checks{model->vocab, std::nullopt, root};
  if (kind == passes::LossKind::mlm)
    checks.maskToken = model->vocab - 1;
  StatusOr<std::unique_ptr<runtime::data::SampleSource>> checked =
      checkSamples(config, DataPart::train, std::move(data), checks);
  if (!checked.isOk())
    return fail(checked.status().message());
  data = std::move(checked).value();
  // --trace: the executor, the pipeline runner and a communicator wrapper record into `trace`.
  std::unique_ptr<runtime::Trace> trace;
  std::unique_ptr<runtime::comm::Communicator> self, tracing;
  if (config.tracePath) {
    trace = std::make_unique<runtime::Trace>();
    if (!mpi)
      self = runtime::comm::makeSelfCommunicator(mesh);
    tracing = runtime::makeTracingCommunicator(mpi ? *mpi : *self, *trace);
  }
  runtime::ExecutorOptions options;
  if (!model->weights.empty())
    options.weights = &model->weights;
  options.comm = tracing ? tracing.get() : mpi.get();
  options.trace = trace.get();
  options.backend = config.backend;
  options.allowTf32 = config.allowTf32;
  auto executor = runtime::Executor::create(*plan, options);
  RankContext rank;
  rank.plan = &*plan;
  rank.comm = mpi.get();
  rank.decoderSeq = model->decoderSeq;
  rank.modelDescription = model->description;
  if (!executor.isOk())
    return fail(executor.status().message(), &rank);
  rank.comm = &(*executor)->communicator();
  rank.trace = trace.get();
  for (size_t a = 0; a < mesh.axisNames.size(); ++a) {
    std::vector<int64_t> coords = (*executor)->coords();
    if (mesh.axisNames[a] == "dp")
      rank.dpRank = coords[a];
    if (mesh.axisNames[a] == "pp" && mesh.axisSizes[a] > 1)
      rank.ppAxis = int64_t(a);
  }
  if (!(*executor)->schedule().empty()) {
    StatusOr<train::PipelineRun> run = train::pipelineRunForRank(*plan, (*executor)->rank());
    if (!run.isOk())
      return fail(run.status().message(), &rank);
    rank.pipeline = std::move(run).value();
    rank.pipeline->trace = trace.get();
    int64_t steps = 0;
    for (const auto &step : rank.pipeline->steps)
      steps += step.kind == schedule::StepKind::forward;
    // The schedule must cover every micro-batch of the step's data.
    int64_t want = config.training.layout.microBatches;
    int64_t chunksHere = rank.pipeline->chunks / rank.pipeline->stages;
    if (rank.pipeline->microBatches != want || steps != chunksHere * want)
      return fail("the plan's pipeline schedule runs " +
                      std::to_string(rank.pipeline->microBatches) + " micro-batches (" +
                      std::to_string(steps) + " forward steps on this stage), but a step has " +
                      std::to_string(want) + " (--global-batch / (--micro-batch x dp))",
                  &rank);
  }
  StatusOr<DType> floatType =
      checkInputs(**executor, {config.rankMicroBatch, seq}, kind, model->decoderSeq);
  if (!floatType.isOk())
    return fail(floatType.status().message(), &rank);
  if (root) {
    const Layout &layout = config.training.layout;
    std::string ranks = config.ranks == 1
                            ? std::string()
                            : ", " + std::to_string(config.ranks) + " ranks (tp " +
                                  std::to_string(layout.tp) + ", pp " + std::to_string(layout.pp) +
                                  ", dp " + std::to_string(layout.dp) + ")";
    std::printf("%s: %lld steps of %lld x %lld tokens (micro-batch %lld, %lld accumulation "
                "steps%s), %s, lr %g %s, on %s; compiled in %.1f ms\n",
                model->description.c_str(), (long long)config.schedule.totalSteps,
                (long long)config.split.globalBatch, (long long)seq,
                (long long)config.rankMicroBatch, (long long)config.split.microBatches(),
                ranks.c_str(), precisionName(config.training.layout.precision), config.schedule.lr,
                train::lrDecayName(config.schedule.decay), runtime::backendName(config.backend),
                model->compileSeconds * 1e3);
    std::fflush(stdout);
  }
  // Validation (--eval-data, else --split's validation part) and --split's test part.
  std::unique_ptr<runtime::data::SampleSource> evalData, testData;
  checks.warn = false;
  for (auto [part, out] :
       {std::pair{DataPart::validation, &evalData}, {DataPart::test, &testData}}) {
    bool used = part == DataPart::validation
                    ? config.evalData || (config.dataSplit && config.evalInterval > 0)
                    : config.dataSplit && (*config.dataSplit)[2] > 0;
    if (!used)
      continue;
    StatusOr<std::unique_ptr<runtime::data::SampleSource>> samples = openSamples(config, part);
    if (samples.isOk() && (*samples)->rowLength() != seq + 1)
      return fail("--eval-data: rows of " + std::to_string((*samples)->rowLength()) +
                      " tokens, but the training data's have " + std::to_string(seq + 1),
                  &rank);
    if (samples.isOk())
      samples = checkSamples(config, part, std::move(samples).value(), checks);
    if (!samples.isOk())
      return fail(samples.status().message(), &rank);
    *out = std::move(samples).value();
  }
  return trainLoop(**executor, config, *data, evalData.get(), testData.get(), kind, model->vocab,
                   *floatType, rank);
}

} // namespace megac::cli
