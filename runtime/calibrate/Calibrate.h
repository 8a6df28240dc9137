// `megac calibrate`: microbenchmarks of the machine it runs on, through the runtime's own
// executor and kernels (CPU: OpenBLAS and the reference kernels; cuda: cuBLASLt and the CUDA
// kernels), collectives through the job's communicator, every rank measuring at once as in
// training. The tables (Results.h) become a device spec the planner reads (planner/Calibration.h).
// It runs no training plan: every plan here is a few buffers and one instruction.
#pragma once

#include "runtime/calibrate/Results.h"
#include "runtime/comm/Communicator.h"
#include "runtime/exec/Executor.h"
#include "support/Status.h"

#include <functional>
#include <string>

namespace megac::runtime::calibrate {

struct Options {
  Backend backend = Backend::cpu;
  bool allowTf32 = false; // cuda: fp32 GEMMs through TF32 tensor cores
  bool quick = false;     // a few points per group and 10 ms per point (tests)
  int64_t threads = 1;    // CPU: kernel/BLAS threads per rank (setKernelThreads), recorded
  /// Every rank of the job on one mesh axis (worldMesh); null: this process alone.
  comm::Communicator *world = nullptr;
  /// How it was started ("megac calibrate --backend cpu --ranks 2"), for the source string.
  std::string command = "megac calibrate";
  /// Called on rank 0 once per group with a line saying what it measured and how long it took.
  std::function<void(const std::string &)> progress;
};

/// Runs every group: instruction overhead, GEMM sweep, streaming bandwidth, memory-bound
/// kernels, attention, and (with more than one rank) collectives. Every rank returns the same
/// tables: each point is the slowest rank's. Errors name the group and the point.
StatusOr<Results> calibrate(const Options &options);

/// The mesh of Options::world: one axis "world" of `ranks`.
comm::Mesh worldMesh(int64_t ranks);

/// Threads per rank as `megac train --threads` sets them: OMP_NUM_THREADS and OpenBLAS's thread
/// count, which the CPU kernels' pool follows (runtime/cpu/Parallel.h).
void setKernelThreads(int64_t threads);
/// megac train's default: the cores shared by the ranks on this node, at least 1.
int64_t defaultThreads(int64_t ranksOnThisNode);

} // namespace megac::runtime::calibrate
