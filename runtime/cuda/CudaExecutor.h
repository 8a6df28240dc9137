// The CUDA executor: one rank's program of a plan on one GPU (runtime/cuda/CudaExecutor.cpp).
// Executor::create with ExecutorOptions::backend == Backend::cuda makes one; this header is for
// the factory and tests.
#pragma once

#include "runtime/exec/Executor.h"

namespace megac::runtime::cuda {

/// The device the executor of `rank` uses when ExecutorOptions::device is -1: its local rank
/// from the launcher's variables, or an error when the node has more local ranks than visible
/// devices (deviceForLocalRank, runtime/cuda/ExecutorSupport.h).
StatusOr<int> defaultDeviceFor(int rank);

/// An executor for `plan` on the GPU. Errors: the backend not built, no usable device (one
/// line), or the plan's (as the CPU executor's).
///
/// MEGAC_CUDA_SYNC_EACH=1 synchronizes after every launch and reads the kernels' error flag, so
/// that a device fault names the instruction that raised it (slow: for locating faults).
///
/// MEGAC_CUDA_PROFILE=1 times every launch step with CUDA events on the compute stream and, when
/// the executor is destroyed, prints the GPU time per opcode to stderr (KernelProfile,
/// runtime/cuda/ExecutorSupport.h): for finding where a step's time goes.
StatusOr<std::unique_ptr<Executor>> createCudaExecutor(const LoadedPlan &plan,
                                                       const ExecutorOptions &options);

/// Forgets what MEGAC_CUDA_PROFILE=1 has summed so far in `executor` (a benchmark's warm-up
/// steps), so that the table printed at its destruction covers the runs after this call. An
/// error when `executor` is not a CUDA executor; nothing to do when profiling is off.
Status resetCudaProfile(Executor &executor);

} // namespace megac::runtime::cuda
