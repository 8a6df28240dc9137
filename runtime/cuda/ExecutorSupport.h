// The CUDA executor's host-side decisions, free of CUDA so that the CPU tests run them
// (tests/unit/runtime/CudaExecutorSupportTest.cpp): which GPU a process takes from its
// launcher's local rank, and how a failing launch step is named.
#pragma once

#include "runtime/plan/plan_generated.h"
#include "support/Status.h"

#include <cstddef>
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

/// How the executor launched a run of instructions.
enum class StepKind { single, fused, adamw };

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
