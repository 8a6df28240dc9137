// A training run as a library (Megatron-Core's pretrain(), taken apart): a TrainSession owns the
// data, the compiled step, the communicator (MPI when the job has several ranks), the executor,
// the pipeline runner, evaluation, checkpoints and the trace of one rank. It prints nothing:
// every call returns a Status, warnings go to the hook, and the caller (`megac train`, a test)
// logs what it wants.
//
//   RunConfig c = ...;                        // fields set, then finishRunConfig(c)
//   auto session = TrainSession::create(c);   // StatusOr<std::unique_ptr<TrainSession>>
//   while ((*session)->stepsDone() < c.lr.totalSteps) (*session)->step();
//   (*session)->save();
#pragma once

#include "driver/Compile.h"
#include "driver/RunConfig.h"
#include "driver/TrainData.h"

#include "runtime/train/RunLogs.h"
#include "runtime/train/StopRequest.h"
#include "runtime/train/TrainLog.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace megac::driver {

// The runtime's names a session's caller holds and prints with, re-exported (as Backend.h does):
// a step's record and its log lines (runtime/train/TrainLog.h), the stop request and decision
// (runtime/train/StopRequest.h), rank 0's JSON-lines and TensorBoard logs
// (runtime/train/RunLogs.h).
using runtime::train::JsonLinesWriter, runtime::train::LogInterval, runtime::train::formatDuration,
    runtime::train::progressLine, runtime::train::stepLogLine, runtime::train::stepRecordJson;
using runtime::train::RunLogs;
using runtime::train::StepRecord, runtime::train::StopDecision, runtime::train::StopRequest;

struct SessionHooks {
  /// One-line warnings (a checkpoint refused, a setting that differs from the checkpoint's, the
  /// data holding masked-LM's [MASK] token); empty: dropped.
  std::function<void(const std::string &)> warn;
};

/// What load() resumed from.
struct Resumed {
  std::string path;   // the checkpoint's directory
  int64_t step = 0;   // the steps it had done
  std::string layout; // the layout it was saved under (Layout::describe)
};

class TrainSession {
public:
  /// The session of this rank; open() does the work.
  explicit TrainSession(RunConfig config, SessionHooks hooks = {});
  ~TrainSession();
  TrainSession(const TrainSession &) = delete;
  TrainSession &operator=(const TrainSession &) = delete;

  /// Opens the training data, compiles the step for its rows, joins the job (MPI when
  /// exec.ranks > 1), creates the executor and the pipeline run, checks the model's inputs
  /// against the data and opens the evaluation data. `config` must have been finished
  /// (finishRunConfig).
  Status open();
  /// A session of `config`, opened.
  static StatusOr<std::unique_ptr<TrainSession>> create(RunConfig config, SessionHooks hooks = {});

  /// Runs optimizer step stepsDone() + 1 (the lr schedule's step, data batch stepsDone());
  /// records it in the trace when it is in the traced window. A non-finite loss is an error on
  /// every rank, before the update.
  StatusOr<runtime::train::StepRecord> step();
  /// step() on a batch the caller gives instead of the configured data (a Python loader's):
  /// `shape` [global batch, sequenceLength() + 1], `tokens` its rows, row-major, each in [0,
  /// vocab()). Every rank passes the same batch, as every rank reads the same data; it reads
  /// its own rows of it. The configured data is read by step number, so a later step() reads
  /// batch stepsDone() of it, not the one this step would have read.
  StatusOr<runtime::train::StepRecord> step(std::span<const int64_t> tokens,
                                            const std::vector<int64_t> &shape);
  /// Whether the run evaluates `part` (validation: --eval-data or --split's validation part with
  /// an interval; test: a nonzero --split test part).
  bool evaluates(DataPart part) const;
  /// The mean loss of evalIters global batches of `part` (the same on every rank).
  StatusOr<double> evaluate(DataPart part);
  /// A sharded checkpoint of the current step in checkpoint.saveDir: every rank its shards,
  /// rank 0 the meta.json; then rank 0 removes what failed saves left and the steps the
  /// retention (keepLast, keepSteps) drops. open() locks the folder (runtime/checkpoint/
  /// SaveFolder.h): a second run saving there fails to open.
  Status save();
  /// Whether to stop after this step: every rank's `request` combined (signals, the time limit),
  /// the same answer on every rank. Every rank calls it at the same step boundary.
  StatusOr<runtime::train::StopDecision> agreeToStop(const runtime::train::StopRequest &request);
  /// Resumes from checkpoint.loadDir's newest usable checkpoint: parameters, Adam state, the
  /// loss scale and the step count (so step() continues after it).
  StatusOr<Resumed> load();
  /// load() from the newest usable checkpoint under `dir` instead (the Python package's
  /// TrainSession.load(path)); checkpoint.finetune and noLoadOptim apply as with --load.
  StatusOr<Resumed> load(const std::string &dir);
  /// The folder save() writes for the steps done (checkpoint.saveDir's step folder).
  std::string savedPath() const;
  /// Every parameter, whole, written by rank 0 in the layout of a one-rank run.
  Status saveWeights(const std::string &path);
  /// Every parameter as a transformers folder `dir` (an hf: model; driver/HfSave.h), written
  /// by rank 0 in shards of checkpoint.hfShardBytes (each gathered alone: rank 0 never holds the
  /// whole model), in the config's torch_dtype, with the input folder's config.json and
  /// tokenizer files. Every rank calls it.
  Status saveHf(const std::string &dir);
  /// The same parameters in memory: whole, in the model's own shapes, by name, on rank 0 (other
  /// ranks get an empty map). Every rank calls it.
  StatusOr<TensorMap> parameters();
  /// The traced steps' events of every rank, written by rank 0 (log.tracePath).
  Status writeTrace();

  const RunConfig &config() const { return config_; }
  /// After open(): the compiled model's description, vocabulary and compile time.
  const std::string &description() const { return model_.description; }
  int64_t vocab() const { return model_.vocab; }
  double compileSeconds() const { return model_.compileSeconds; }
  /// Tokens per row the model reads (S).
  int64_t sequenceLength() const { return seq_; }
  int64_t stepsDone() const { return stepsDone_; }
  /// This rank and the job's ranks (0 and 1 before the communicator exists).
  int rank() const;
  int ranks() const;
  bool root() const { return rank() == 0; }

private:
  struct State;
  Status openData();
  Status openRank();
  Status openEvaluation();
  Status lockSaveFolder();
  StatusOr<runtime::train::StepRecord> stepOn(runtime::data::SampleSource &data);
  RunConfig config_;
  SessionHooks hooks_;
  TrainModel model_;
  int64_t seq_ = 0;
  int64_t stepsDone_ = 0;
  std::unique_ptr<State> state_;
};

} // namespace megac::driver
