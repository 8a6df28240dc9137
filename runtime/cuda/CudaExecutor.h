// The CUDA executor: one rank's program of a plan on one GPU (runtime/cuda/CudaExecutor.cpp).
// Executor::create with ExecutorOptions::backend == Backend::cuda makes one; this header is for
// the factory and tests.
#pragma once

#include "runtime/exec/Executor.h"

namespace megac::runtime::cuda {

/// The device the executor of `rank` uses when ExecutorOptions::device is -1: the local rank
/// (OMPI_COMM_WORLD_LOCAL_RANK, else the rank) modulo the devices.
int defaultDeviceFor(int rank);

/// An executor for `plan` on the GPU. Errors: the backend not built, no usable device (one
/// line), or the plan's (as the CPU executor's).
StatusOr<std::unique_ptr<Executor>> createCudaExecutor(const LoadedPlan &plan,
                                                       const ExecutorOptions &options);

} // namespace megac::runtime::cuda
