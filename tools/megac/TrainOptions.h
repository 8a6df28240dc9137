// The options of `megac train`: parsed and validated once into a TrainConfig (the training
// step's settings, the data split, the lr schedule, loss scaling and the multi-rank layout), and
// the process-level parts of a multi-rank launch (mpirun relaunch, threads, terminal).
#pragma once

#include "tools/megac/Args.h"

#include "passes/training/TrainingPipeline.h"
#include "runtime/exec/Executor.h"
#include "runtime/train/LossScaler.h"
#include "runtime/train/LrSchedule.h"
#include "runtime/train/TokenBatches.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::cli {

/// The settings of one `megac train` run, validated by parseTrainArgs.
struct TrainConfig {
  std::optional<std::string> spec, file;
  std::string dataPath;
  // --data PREFIX of an indexed dataset (PREFIX.bin/.idx): rows of S+1 tokens cut from it, S
  // from --seq or the zoo spec.
  bool indexedData = false;
  // The indexed datasets read, with their weights: --data PREFIX is a blend of one, --data-path
  // [W1] PREFIX1 [W2 PREFIX2 ...] Megatron's weighted blend (runtime/data BlendedSamples; dataPath
  // then spells the blend, for logs and checkpoints).
  std::vector<std::pair<double, std::string>> blend;
  int64_t dataSeq = 0; // --seq; 0: the spec's
  // Validation: --eval-data (a .npy or an indexed dataset), every --eval-interval steps (and
  // after the last), the mean loss of --eval-iters global batches of it.
  std::optional<std::string> evalData;
  int64_t evalInterval = 0;
  int64_t evalIters = 1;
  // --split A,B,C (Megatron's): the documents of each indexed dataset in train/valid/test parts
  // (runtime/data splitDocuments); training reads part 0, validation (without
  // --eval-data) part 1, and a test part is evaluated after the last step (--eval-iters batches).
  std::optional<std::vector<double>> dataSplit;
  runtime::train::BatchSplit split;
  runtime::train::LrSchedule schedule;
  passes::TrainingOptions training;
  runtime::train::LossScalerConfig scaler;
  uint64_t seed = 0;
  std::optional<std::string> logJson, saveWeights, saveGrads;
  // --log-interval N: off a terminal, one log line per N steps (their mean loss and step time).
  int64_t logInterval = 1;
  // Checkpoints (runtime/checkpoint): --save DIR every --save-interval steps and at the end;
  // --load DIR resumes from DIR's newest usable checkpoint (--steps stays the total).
  std::optional<std::string> saveDir, loadDir;
  int64_t saveInterval = 0; // 0: only at the end of the run
  // --trace FILE.json: the executed timeline of steps traceFirst..traceLast (1-based, inclusive).
  std::optional<std::string> tracePath;
  int64_t traceFirst = 0, traceLast = -1;
  // Ranks: the split holds the model's (global) micro-batch b*dp; each rank feeds b rows.
  int64_t ranks = 1;
  int64_t rankMicroBatch = 0;
  int64_t threads = 0; // 0: cores / ranks on this node
  // --backend cpu|cuda (default: cuda when a device is usable) and --allow-tf32.
  runtime::Backend backend = runtime::Backend::cpu;
  bool allowTf32 = false;
  int64_t commTimeout = 300;
  bool oversubscribe = false;
  // `megac plan` / `megac compile` with a layout: compile the step's plan, do not train.
  bool planOnly = false;
  bool explain = false, explainJson = false;
  std::optional<std::string> planOut;
};

/// A finite decimal number; nullopt otherwise.
std::optional<double> parseNumber(const std::string &text);
/// Reads the integer option `name` (>= `min`); returns an error message or empty.
std::string countOption(const Args &args, const char *name, int64_t min, int64_t &out,
                        bool required);

/// Fills `c` from the arguments of `megac train`; returns a one-line error or empty.
/// `megac train --help`.
extern const char *const kTrainHelp;

std::string parseTrainArgs(const Args &args, TrainConfig &c);

/// The ranks of an mpirun launch (Open MPI, PMI or PMIx environment), or 0 outside one.
int64_t launchedRanks();

/// Whether stdout is a terminal (a live progress line) for the process writing the log.
bool stdoutIsTerminal();

/// `--ranks N` outside an MPI launch: re-executes this command under `mpirun -np N`. Returns
/// (1, after printing why) only when mpirun cannot be started.
int relaunchUnderMpirun(int argc, char **argv, const TrainConfig &c);

/// BLAS and OpenMP threads per rank: --threads, else the cores shared by the ranks on this node.
void setThreads(const TrainConfig &c);

} // namespace megac::cli
