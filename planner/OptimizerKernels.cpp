// The optimizer step's kernel inventory (planner/OptimizerKernels.h).
#include "planner/OptimizerKernels.h"

#include "planner/KernelBuilder.h"

#include <algorithm>

namespace megac::planner {

using detail::Builder;

std::vector<KernelOp> optimizerKernels(double parameters, double tensors, double updated,
                                       Precision precision, const StackProfile &stack,
                                       bool partitioned, bool dataParallel, int zero,
                                       const TpReplicatedGradients &replicated,
                                       double groupedExperts, const NormGroups &norm) {
  // AdamW reads the fp32 gradient, master weight and two moments and writes those three and
  // (mixed precision) the half copy: 28 bytes per parameter in fp32, 30 otherwise (28 where the
  // step casts its parameters at their use instead: StackProfile::halfCastInstructions); the
  // global norm reads every local gradient once and clipping scales them (read + write).
  PassKernels pass;
  Builder b{&pass};
  double kernels = stack.multiTensorOptimizer ? 1 : tensors;
  bool halfCopy = precision != Precision::fp32 && !stack.halfCastInstructions;
  b.mem(KernelClass::adamw, updated * (halfCopy ? 30 : 28) / kernels, kernels);
  if (stack.groupedGlobalNorm && partitioned) {
    // megac on several ranks: one norm per group of gradients split over the same mesh axes
    // (over the ZeRO shards under ZeRO), squared back (a scalar product), the groups' sums
    // added, one square root.
    double groups = double(std::max(1, norm.groups));
    b.mem(KernelClass::globalNorm, norm.parameters * 4 / groups, groups);
    b.mem(KernelClass::elementwise, 12, groups);
    if (groups > 1)
      b.mem(KernelClass::elementwise, 12, groups - 1);
    b.mem(KernelClass::elementwise, 8);
  } else {
    b.mem(KernelClass::globalNorm, parameters * 4);
  }
  // The concatenations and slices below pass over the whole gradient and parameter state once
  // each, long after it was last touched: where the state outgrows the last-level cache every
  // byte they move streams from main memory (KernelOp::coldBytes; KernelModel charges it only
  // there).
  auto stateCopy = [&](double bytes, double count = 1) {
    b.mem(KernelClass::copy, bytes, count);
    if (bytes > 0 && count > 0)
      b.cold(bytes);
  };
  if (stack.concatenatesGradients) {
    // Each reduction's gradients are concatenated into one buffer and sliced back per tensor:
    // under sequence parallelism the tp-replicated ones (reduced over tp, and dp), then, with
    // dp > 1, the rest but a learned position table (reduced by itself); ZeRO-2 reduce-scatters
    // in the backward instead. ZeRO-1/2 then take each tensor's shard (ShardSlice) for the
    // update, and concatenate the updated shards for their all-gather, sliced back per tensor
    // and copied into the parameters.
    if (dataParallel && (zero == 1 || zero == 2)) {
      double shard = updated * 4;
      stateCopy(2 * shard / tensors, tensors);
      stateCopy(2 * shard);
      stateCopy(parameters * 8 / tensors, tensors);
      stateCopy(parameters * 8 / tensors, tensors);
    }
    bool reducesHere = dataParallel && zero < 2;
    double rest = parameters, restTensors = tensors;
    if (replicated.tensors > 0) {
      stateCopy(replicated.parameters * 8);
      stateCopy(replicated.parameters * 8 / replicated.tensors, replicated.tensors);
      rest -= replicated.parameters;
      restTensors -= replicated.tensors + replicated.alone;
    }
    if (reducesHere && restTensors > 0) {
      // Under expert parallelism the experts' gradients are concatenated apart (their own
      // reduction group): two concatenations, the same slices back. Under ZeRO-1 the dense
      // gradients are first all-reduced over ep tensor by tensor (no copies), then every
      // gradient is reduce-scattered over the expert-data-parallel group from one buffer: one
      // concatenation (megac plan --explain: AllReduce [ep] per dense tensor, one ReduceScatter
      // [dp]).
      double experts = zero == 1 ? 0.0 : std::min(groupedExperts, rest);
      stateCopy((rest - experts) * 8);
      stateCopy(experts * 8);
      stateCopy(rest * 8 / restTensors, restTensors);
    }
  }
  if (stack.clipPass)
    b.mem(KernelClass::elementwise, parameters * 8);
  return pass.kernels;
}

} // namespace megac::planner
