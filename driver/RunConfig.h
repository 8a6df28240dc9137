// The one configuration of a training run (Megatron-Core's config objects, in one struct): the
// model, the step's options with its Layout (parallel/Layout.h, which the planner and the passes
// use too), the optimizer, lr schedule, loss scaling, data, checkpoints, logging and execution.
// `megac train`, `megac plan` and `megac compile --ranks` fill it from flags; tests fill it
// directly. finishRunConfig derives what follows from it and checks the combination once.
#pragma once

#include "driver/Backend.h"
#include "driver/ModelSource.h"

#include "passes/training/TrainingPipeline.h"
#include "runtime/comm/Communicator.h"
#include "runtime/exec/Executor.h"
#include "runtime/train/LossScaler.h"
#include "runtime/train/LrSchedule.h"
#include "runtime/train/TokenBatches.h"
#include "support/Status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace megac::driver {

// The runtime's names a configuration's filler sets and prints, re-exported (as Backend.h does).
using runtime::comm::kMaxCommTimeoutSeconds;
using runtime::train::LrDecay;
using runtime::train::lrDecayName;
using runtime::train::parseLrDecay;

/// The data of a run: training rows, their split into documents parts, evaluation.
struct DataConfig {
  /// --data: a .npy of rows [N, S+1] or the PREFIX of an indexed dataset (PREFIX.bin/.idx); for
  /// a blend, its spelling (logs and checkpoints).
  std::string path;
  /// Rows of S+1 tokens cut from indexed datasets (S: `seq`, else the zoo spec's).
  bool indexed = false;
  /// The indexed datasets read, with their weights: --data PREFIX is a blend of one,
  /// --data-path [W1] PREFIX1 [W2 PREFIX2 ...] Megatron's weighted blend.
  std::vector<std::pair<double, std::string>> blend;
  int64_t seq = 0; // --seq; 0: the spec's
  /// Validation: --eval-data (a .npy or an indexed dataset), every evalInterval steps (and after
  /// the last), the mean loss of evalIters global batches.
  std::optional<std::string> evalPath;
  int64_t evalInterval = 0;
  int64_t evalIters = 1;
  /// --split A,B,C (Megatron's): each dataset's documents in train/validation/test parts.
  std::optional<std::vector<double>> split;
  /// --objective causal|mlm: the training objective of a model file (empty: causal; a zoo
  /// model's is its architecture's). mlm masks a seeded 15% of each row's positions with
  /// --mask-token-id (default: the vocabulary's last id), as the zoo's BERT does.
  std::string objective;
  std::optional<int64_t> maskTokenId;
  /// --pad-token-id: causal training of padded rows. A position whose input token is this id
  /// is padding: the model's attention_mask is 0 there (its keys are masked out), and a label
  /// whose input or target token is padding is ignored (no loss, not counted).
  std::optional<int64_t> padTokenId;
  /// Samples per optimizer step and per micro-batch of the whole model (b * dp; finishRunConfig
  /// sets it from layout.microBatch). globalBatch 0 in a plan: enough to fill the pipeline.
  runtime::train::BatchSplit batch;
};

/// Checkpoints and the files a run writes at its end.
struct CheckpointConfig {
  std::optional<std::string> saveDir, loadDir; // --save (sharded checkpoints), --load (resume)
  int64_t saveInterval = 0;                    // 0: only at the end of the run
  std::optional<std::string> saveWeights;      // the final parameters, whole
  std::optional<std::string> saveGrads;        // step 1's gradients, whole
  /// --save-hf DIR: the final parameters as a transformers folder (hf: models; HfSave.h),
  /// in safetensors shards of at most hfShardBytes (--hf-shard-size).
  std::optional<std::string> saveHf;
  uint64_t hfShardBytes = 5'000'000'000;
  /// --allow-missing NAME...: parameters an hf: folder's weights may lack (they keep their
  /// initialisation: a head trained from scratch).
  std::vector<std::string> allowMissing;
  /// Retention after each save (--keep-last N, --keep-steps a,b,...): the keepLast newest
  /// complete steps and every listed one stay; 0 keeps every step.
  int64_t keepLast = 0;
  std::vector<int64_t> keepSteps;
  /// What --load takes (Megatron's names): --finetune loads the parameters only and starts at
  /// step 0; --no-load-optim keeps the optimizer state fresh; --no-load-rng takes this run's
  /// --seed over the checkpoint's without a warning.
  bool finetune = false, noLoadOptim = false, noLoadRng = false;
};

/// What a run records.
struct LogConfig {
  std::optional<std::string> jsonPath; // one JSON object per step and line
  /// --tensorboard-dir: TensorBoard event files with the JSON log's scalars (rank 0; created if
  /// missing; a new file per run).
  std::optional<std::string> tensorboardDir;
  int64_t interval = 1;                // off a terminal, one line per `interval` steps
  /// --trace: the executed timeline of steps traceFirst..traceLast (1-based, inclusive);
  /// finishRunConfig sets the window: traceSteps steps from step 2 (step 1 warms up).
  std::optional<std::string> tracePath;
  int64_t traceSteps = 2;
  int64_t traceFirst = 0, traceLast = -1;
};

/// Where and how the ranks run.
struct ExecConfig {
  int64_t ranks = 0;   // 0: one, or what mpirun started
  int64_t threads = 0; // BLAS threads per rank; 0: the node's cores / ranks on it
  runtime::Backend backend = runtime::Backend::cpu;
  bool allowTf32 = false;
  int64_t commTimeoutSeconds = 300;
  /// `--emulate-link`: every collective of the CPU ranks completes no earlier than this link's
  /// alpha-beta time after it was posted (a measurement tool; off by default).
  runtime::comm::LinkEmulation emulateLink;
  /// Stopping early (runtime/train/StopRequest.h): on a signal (--exit-signal-handler; on by
  /// default with --save) and when the wall time passes --exit-duration-in-mins, the ranks agree
  /// at a step boundary, save (with --save) and end.
  bool exitOnSignal = false;
  std::optional<double> exitDurationMinutes;
};

struct RunConfig {
  ModelSource model;
  /// The training step: AdamW, the logits' name and the Layout (training.layout: degrees,
  /// micro-batch, recompute, precision, schedule; dp 0 = the ranks left by tp and pp).
  /// lossKind is the model's (lossKindOf), set when the step is compiled.
  passes::TrainingOptions training;
  runtime::train::LrSchedule lr;
  runtime::train::LossScalerConfig scaler;
  DataConfig data;
  CheckpointConfig checkpoint;
  LogConfig log;
  ExecConfig exec;
  uint64_t seed = 0;
  /// A plan only (`megac plan`, `megac compile --ranks`): compiled, never run; the data may be
  /// absent (the spec gives the sequence length) and globalBatch defaults to fill the pipeline.
  bool planOnly = false;

  const Layout &layout() const { return training.layout; }
};

/// Derives what the configuration implies and checks it, once: the ranks (what mpirun started),
/// dp from the ranks left by tp and pp, the model micro-batch b*dp and the micro-batches per
/// step, the trace window; then the layout (its product is the ranks, sequence parallelism needs
/// tp, vpp needs pp, ZeRO needs dp), the batch split, lr schedule, loss scaler and files. Errors
/// are one line and name the setting by its flag.
Status finishRunConfig(RunConfig &c);

/// The ranks of an mpirun launch (Open MPI, PMI or PMIx environment), or 0 outside one.
int64_t launchedRanks();

} // namespace megac::driver
