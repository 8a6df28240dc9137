// The groups of `megac calibrate`'s microbenchmarks (internal to runtime/calibrate): each runs
// its plans through the backend's executor on every rank at once and appends to Results.
#pragma once

#include "runtime/calibrate/BenchPlan.h"
#include "runtime/calibrate/Results.h"
#include "runtime/calibrate/Timing.h"

#include <string>
#include <vector>

namespace megac::runtime::calibrate {

struct BenchContext {
  Backend backend = Backend::cpu;
  bool allowTf32 = false;
  bool quick = false;
  Sync *sync = nullptr;
  TimingPolicy policy;
  /// The dtype of activations in training on this backend: f32 on the CPU, bf16 on a GPU.
  DType activation = DType::f32;
  /// Instructions per function when a GPU's per-run synchronization must be taken out (the
  /// difference between a run of `repeat` copies and a run of one).
  int repeat = 1;
};

/// Seconds of one instruction of each of `instructions` (operands in plan.program(0)): on the
/// CPU one run of a function holding it, on a GPU the difference between a function of
/// ctx.repeat copies and a function of one, per copy.
StatusOr<std::vector<double>> timeInstructions(const BenchContext &ctx, BenchPlan &plan,
                                               const std::vector<BenchInstruction> &instructions);

// ComputeBenches.cpp
/// One tiny instruction (a 1-element Mul) through the executor; `detail` says how it was taken.
Status benchInstructionOverhead(const BenchContext &ctx, Results &out, std::string &detail);
Status benchGemm(const BenchContext &ctx, Results &out);
Status benchAttention(const BenchContext &ctx, Results &out);

// KernelBenches.cpp
/// The memory-bound kernel classes in the order they are measured (planner/KernelModel.h names).
const std::vector<std::string> &kernelClassNames();
/// One instruction of kernel class `kernel` moving about `targetBytes` (operands + results).
StatusOr<BenchInstruction> kernelInstruction(BenchProgram &program, const std::string &kernel,
                                             double targetBytes, DType activation);
Status benchKernels(const BenchContext &ctx, Results &out);
Status benchBandwidth(const BenchContext &ctx, Results &out);

// CommBenches.cpp
/// all_reduce, all_gather, reduce_scatter and send_recv over every rank of the job.
Status benchCollectives(const BenchContext &ctx, Results &out);

} // namespace megac::runtime::calibrate
