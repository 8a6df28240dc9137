// The CUDA executor's host-side decisions, free of CUDA so that the CPU tests run them
// (tests/unit/runtime/CudaExecutorSupportTest.cpp): which GPU a process takes from its
// launcher's local rank, how a failing launch step is named, and the per-opcode GPU time
// profile of MEGAC_CUDA_PROFILE=1 (its keys, sums and table).
#pragma once

#include "runtime/plan/plan_generated.h"
#include "support/Status.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace megac::runtime::cuda {

/// Environment variables by name (only those deviceForLocalRank reads matter).
using LauncherEnv = std::map<std::string, std::string>;

/// The variables deviceForLocalRank reads, as this process's environment has them.
LauncherEnv launcherEnvironment();

/// The device of the process of world rank `rank` when `devices` CUDA devices are visible to it:
/// its local rank on the node, from the first launcher whose local-rank variable is set
///   Open MPI     OMPI_COMM_WORLD_LOCAL_RANK   size OMPI_COMM_WORLD_LOCAL_SIZE
///   MPICH/Hydra  MPI_LOCALRANKID              size MPI_LOCALNRANKS
///   torchrun     LOCAL_RANK                   size LOCAL_WORLD_SIZE
///   Slurm        SLURM_LOCALID                size SLURM_NTASKS_PER_NODE, else this node's
///                                             entry (SLURM_NODEID) of SLURM_TASKS_PER_NODE
/// else the world rank. Slurm comes last although srun is often the outermost launcher: one srun
/// task that runs Hydra's proxy or torchrun passes its SLURM_LOCALID (0) to every process it
/// starts, whose own launcher's variable is the right one.
///
/// Each process needs a GPU of its own (NCCL refuses two ranks of one communicator on one
/// device), so more local ranks than devices is an error naming the counts and the variables,
/// rather than shared devices and NCCL's late "Duplicate GPU". Except: a process that sees one
/// device through CUDA_VISIBLE_DEVICES was given that device (Slurm's --gpus-per-task, or a
/// wrapper script), and takes it whatever its local rank. A malformed variable is an error.
StatusOr<int> deviceForLocalRank(const LauncherEnv &env, int rank, int devices);

/// Whether MEGAC_CUDA_SYNC_EACH (`value`, null when unset) asks the executor to synchronize after
/// every launch: "1" yes; unset, empty or "0" no; anything else an error.
StatusOr<bool> syncEachRequested(const char *value);

/// Whether MEGAC_CUDA_PROFILE (`value`, null when unset) asks the executor to time every launch
/// step with CUDA events: "1" yes; unset, empty or "0" no; anything else an error.
StatusOr<bool> profileRequested(const char *value);

/// How the executor launched a run of instructions.
enum class StepKind { single, fused, adamw };

/// The row of the profile a launch step is counted in: the opcode of a single instruction
/// ("MatMul"), "fused elementwise" for an NVRTC-fused group, "AdamW (multi-tensor)" for a run of
/// AdamW instructions in one launch.
std::string profileKey(megac::plan::Opcode op, StepKind kind);

/// The GPU time of launch steps by key (profileKey), summed over function runs: what
/// MEGAC_CUDA_PROFILE=1 prints when the executor is destroyed. The times come from CUDA events
/// recorded around each step on the compute stream.
class KernelProfile {
public:
  /// One step of `key` that took `ms` milliseconds.
  void add(const std::string &key, double ms);
  /// One function run ended (the header's count).
  void countRun() { ++runs_; }
  /// Forgets every step and run (a benchmark's warm-up).
  void reset();
  uint64_t runs() const { return runs_; }
  bool empty() const { return rows_.empty(); }

  /// The table, one row per key by total time, largest first (ties by key), e.g.
  ///   megac: CUDA profile of rank 0 over 8 function runs: 1290 launch steps, 41.230 ms
  ///     key                calls   total ms  % time    mean us
  ///     MatMul               480     30.120    73.1     62.750
  std::string format(int rank) const;

private:
  struct Row {
    uint64_t calls = 0;
    double ms = 0;
  };
  std::map<std::string, Row> rows_;
  uint64_t runs_ = 0;
};

/// How errors name a launch step: describeInstruction of its first instruction, and for a fused
/// or multi-tensor AdamW launch of `count` instructions, how many follow it in the same launch.
std::string describeStep(const megac::plan::Program &program, size_t programIndex, size_t function,
                         size_t first, size_t count, StepKind kind);

/// The error of a step after which MEGAC_CUDA_SYNC_EACH=1's synchronization returned the CUDA
/// error `errorName` (cudaGetErrorName) with `errorString` (cudaGetErrorString):
///   "program 'main', function 'forward', instruction 123 (MatMul at 'model.onnx:attn/MatMul')
///    failed on CUDA device 0: cudaErrorIllegalAddress: an illegal memory access was
///    encountered (MEGAC_CUDA_SYNC_EACH=1 synchronized after every instruction before it)"
std::string syncEachFailure(const megac::plan::Program &program, size_t programIndex,
                            size_t function, size_t first, size_t count, StepKind kind,
                            std::string_view errorName, std::string_view errorString, int device);

} // namespace megac::runtime::cuda
