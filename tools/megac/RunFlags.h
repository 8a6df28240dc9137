// The flags of a training run (`megac train`; `megac plan` and `megac compile` with a layout take
// the same ones) into the driver's RunConfig: each flag's value range-checked as it is read, the
// relations between flags checked here, the rest by driver::finishRunConfig.
#pragma once

#include "tools/megac/Cli.h"

#include "driver/RunConfig.h"

#include <string>
#include <vector>

namespace megac::cli {

/// The run flags' raw values, bound to a Flags until it has parsed.
struct RunFlags {
  driver::RunConfig config;
  std::optional<std::string> spec, data, evalData, split, seed, logits, backend;
  std::optional<std::string> hfShardSize; // --hf-shard-size, parsed in configure
  std::optional<std::string> emulateLink; // --emulate-link BYTES_PER_S,LATENCY_S
  std::string overlap = "off";            // --overlap on|off: the latency-hiding pass
  std::string cpCommType = "all_gather";  // --cp-comm-type all_gather|p2p (context parallelism)
  std::string reshard = "on";             // --reshard-after-forward on|off (ZeRO-3)
  std::vector<std::string> dataPath;
  std::string objective = "causal";
  int64_t maskTokenId = 0, padTokenId = 0;
  std::string lrSchedule = "constant", recompute = "none", schedule = "1f1b", precision = "fp32";
  double lrValue = 0;
  int64_t zero = 0, traceSteps = 2, globalBatch = 0;
  bool sequenceParallel = false, oversubscribe = false;

  /// Declares the flags of a run into `flags`.
  void declare(Flags &flags);
  /// After flags.parse: the configuration (finished and checked), or a one-line error.
  /// `planOnly`: a plan, where --data, --steps, --global-batch, --micro-batch and --lr may be
  /// left out.
  std::string configure(const Flags &flags, bool planOnly);
};

/// `--ranks N` outside an MPI launch: runs this command under `mpirun -np N` as a child, turning
/// a SIGTERM or SIGINT this process receives into SIGUSR2 for the ranks, and returns mpirun's
/// exit code (128 + the signal when a signal ended it; 1, after printing why, when mpirun cannot
/// be started). Launcher.cpp. `threads`: kernel threads per rank (0: the node's cores shared by
/// the ranks, as setThreads); with more than one, mpirun binds nothing (Open MPI binds each of 2
/// or fewer ranks to one core, which would crowd a rank's threads onto it) and each rank places
/// its own threads in its block of CPUs (runtime::cpu::setKernelThreads).
int relaunchUnderMpirun(int argc, char **argv, const std::string &command, int64_t ranks,
                        bool oversubscribe, int64_t threads);

/// BLAS and OpenMP threads per rank: `threads`, else the cores shared by the ranks on this node.
void setThreads(int64_t threads, int64_t ranks);

/// Whether stdout is a terminal (a live progress line) for the process writing the log.
bool stdoutIsTerminal();

} // namespace megac::cli
