// The kernels of one optimizer step on one rank as a software stack launches them: AdamW, the
// global gradient norm, clipping, and the gradients' concatenation and slicing around their
// reductions. MLIR-free.
#pragma once

#include "planner/KernelModel.h"
#include "planner/StackProfile.h"

#include <vector>

namespace megac::planner {

/// Under sequence parallelism (tp > 1) the parameters every tp rank holds whole have partial
/// gradients that are summed over tp before the update: the norms and row-parallel biases
/// (`parameters` in `tensors` tensors), and a learned position table, reduced by itself
/// (`alone`: 0 or 1 tensor).
struct TpReplicatedGradients {
  double parameters = 0, tensors = 0, alone = 0;
};

/// The optimizer step over `parameters` local parameters held in `tensors` tensors, of which
/// `updated` are updated here (ZeRO-1: 1/dp): AdamW, the global gradient norm and clipping;
/// `partitioned` when the step runs on several ranks, `dataParallel` when dp > 1 (`zero`: the
/// ZeRO level); `replicated` under sequence parallelism; `groupedExperts`: the expert
/// parameters among them when expert parallelism reduces their gradients as a group of their own
/// (over the dp / ep ranks holding the same experts); `norm`: what a partitioned stack's global
/// norm reads (groupedGlobalNorm).
struct NormGroups {
  /// Groups of gradients split over the same mesh axes: one norm kernel each.
  int groups = 1;
  /// The gradient elements the rank's norm reads: its ZeRO shard under ZeRO.
  double parameters = 0;
};
std::vector<KernelOp> optimizerKernels(double parameters, double tensors, double updated,
                                       Precision precision, const StackProfile &stack,
                                       bool partitioned, bool dataParallel, int zero = 0,
                                       const TpReplicatedGradients &replicated = {},
                                       double groupedExperts = 0, const NormGroups &norm = {});

} // namespace megac::planner
