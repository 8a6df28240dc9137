// One training step's memory per GPU under a layout (StepEstimator::fillMemory, memory, and the
// ZeRO-2/3 buffers it counts), split from planner/Planner.cpp's times. Model assumptions are
// stated where they are used (docs/planner.md, "Memory per device").
#include "planner/CostModel.h"
#include "support/Checked.h"

#include <algorithm>
#include <cmath>

namespace megac::planner {
namespace {

// Kv heads a rank holds (whole ones when tp replicates them, BlockKernels.cpp).
int64_t localKvHeads(const TransformerShape &s, int64_t tp) {
  int64_t kv = s.kvHeads > 0 ? s.kvHeads : s.heads;
  return kvReplicas(s, tp) > 1 ? kv : kv / tp;
}

} // namespace

double StepEstimator::largestGatheredUnit(const Layout &l, bool first, bool last) const {
  // A block's local parameters (its experts: the ones held here), or an edge stage's table.
  double layers = double(l.vpp * ceilDiv(shape_.layers, l.pp * l.vpp));
  double block = stageParameters(l, false, false) / layers;
  double table = double(ceilDiv(shape_.vocab, l.tp)) * double(shape_.hidden);
  return std::max(block, first || last ? table : 0.0);
}

double StepEstimator::gatheredParameterBytes(const Layout &l) const {
  if (l.zero < 3)
    return 0;
  if (!l.reshardAfterForward) // every gathered parameter kept for the backward (one stage)
    return std::max(stageParameters(l, true, l.pp == 1), stageParameters(l, l.pp == 1, true)) *
           parameterBytes(l.precision).parameter;
  double unit =
      std::max(largestGatheredUnit(l, true, l.pp == 1), largestGatheredUnit(l, l.pp == 1, true));
  bool prefetched = stack_.overlaps(stack_.prefetchShardedParams);
  return unit * parameterBytes(l.precision).parameter * (prefetched ? 2 : 1);
}

double StepEstimator::gradientBucketBytes(const Layout &l) const {
  if (l.zero < 2)
    return 0;
  double layers = double(l.vpp * ceilDiv(shape_.layers, l.pp * l.vpp));
  return stageParameters(l, false, false) / layers * parameterBytes(l.precision).gradient;
}

void StepEstimator::fillMemory(const Layout &l, StepCost &cost) {
  const TransformerShape &s = shape_;
  int64_t m = globalBatch_ / (l.dp * l.microBatch);
  ParameterBytes pb = parameterBytes(l.precision);
  int64_t e = elementBytes(l.precision);
  int64_t layersPerChunk = ceilDiv(s.layers, l.pp * l.vpp);
  // Context parallelism: each rank keeps the activations of seq/cp tokens of a sample.
  TransformerShape local = s;
  local.seq = s.seq / l.cp;
  double none = layerActivationBytes(local, l.microBatch, l.tp, l.sequenceParallel, Recompute::none,
                                     l.precision, &stack_);
  double kept = layerActivationBytes(local, l.microBatch, l.tp, l.sequenceParallel, l.recompute,
                                     l.precision, &stack_);
  // A block's input, 2·s·b·h bytes at 2-byte elements (sequence-split under SP and cp); fp32
  // on a stack that keeps the residual stream in fp32 under mixed precision.
  bool fp32Residual = stack_.fp32ResidualStream && e < 4;
  double tokens =
      double(l.microBatch * local.seq * s.hidden) / (l.sequenceParallel ? double(l.tp) : 1.0);
  double residual = tokens * double(fp32Residual ? 4 : e);
  // Such a stack keeps both norms' inputs (Korthikanti's 4·s·b·h of 2-byte elements) in fp32:
  // 2·2·s·b·h more bytes per layer.
  if (fp32Residual) {
    none += 4 * tokens;
    if (l.recompute != Recompute::full)
      kept += 4 * tokens;
  }
  // Under sequence parallelism a stack that keeps the all-gathered inputs of the two
  // column-parallel linears (Korthikanti's QKV and MLP inputs, 2·s·b·h each at 2-byte
  // elements, /t in his SP count) keeps them whole.
  if (l.sequenceParallel && l.tp > 1 && stack_.keepsGatheredLinearInputs) {
    double whole =
        2.0 * double(l.microBatch * local.seq * s.hidden) * double(e) * (1.0 - 1.0 / double(l.tp));
    none += whole;
    if (l.recompute != Recompute::full)
      kept += whole;
  }
  double logits = double(l.microBatch * local.seq) * double(ceilDiv(s.vocab, l.tp)) * 4;
  // Context parallelism's K/V in flight for one layer: the whole sequence's [b, S, hk, d] pair
  // (all-gather-kv), or the ring's block being computed and the one being received; megac's
  // ring backward (its plan scratch, codegen) also holds two dK/dV blocks, the recomputed
  // output [b, S/cp, h/tp, d] and three f64 row statistics per query row and head.
  double cpKv = 0;
  if (l.cp > 1) {
    int64_t dh = s.hidden / s.heads;
    double pair =
        2.0 * double(l.microBatch) * double(s.seq) * double(localKvHeads(s, l.tp) * dh) * double(e);
    if (!stack_.runsContextParallelRing(l.cpRing)) {
      cpKv = pair;
    } else {
      double block = pair / double(l.cp),
             rows = double(l.microBatch) * double(local.seq) * double(s.heads / l.tp);
      cpKv = 2 * block;
      if (stack_.ringGradientsBlock)
        cpKv += 2 * block;
      if (stack_.ringBackwardRecomputesStatistics)
        cpKv += rows * double(dh) * double(e) + 3 * rows * 8;
    }
  }
  int64_t denseShards = l.zero ? denseZeroShards(l) : 1,
          expertShards = l.zero ? expertZeroShards(l) : 1;
  auto sharded = [&](double params, double experts, double bytes, bool on) {
    return on ? (params - experts) * bytes / double(denseShards) +
                    experts * bytes / double(expertShards)
              : params * bytes;
  };
  auto stage = [&](int64_t index, StepCost &c) {
    bool first = index == 0, last = index == l.pp - 1;
    double params = stageParameters(l, first, last), experts = stageExpertParameters(l);
    // ZeRO-1 shards the optimizer state, ZeRO-2 the gradients too (whole only in the bucket
    // being reduced: one block's), ZeRO-3 the parameters too (whole only for the gathered
    // units in flight: one, or two with prefetch).
    double inFlightShards = gradientBucketBytes(l); // ZeRO-2/3's bucket, ZeRO-3's gathered unit
    if (l.zero >= 3 && l.reshardAfterForward)
      inFlightShards += largestGatheredUnit(l, first, last) * pb.parameter *
                        (stack_.overlaps(stack_.prefetchShardedParams) ? 2 : 1);
    // Without reshard after forward every gathered parameter of the stage lives from its
    // forward use to its backward one, so across the backward's peak (the stash complete): the
    // stage's whole parameters, beside the shards (the gathered units in flight are among them).
    double keptGathered = l.zero >= 3 && !l.reshardAfterForward ? params * pb.parameter : 0.0;
    c.parameterBytes = sharded(params, experts, pb.parameter, l.zero >= 3);
    // A stack that gathers the f32 master (in the optimizer state) stores no half-precision
    // shard under zero 3.
    bool half = l.precision == Precision::bf16 || l.precision == Precision::fp16;
    if (l.zero >= 3 && half && stack_.gathersMasterWeights)
      c.parameterBytes = 0;
    c.gradientBytes = sharded(params, experts, pb.gradient, l.zero >= 2);
    c.optimizerBytes = sharded(params, experts, pb.optimizer, l.zero >= 1);
    if (!stack_.shardedBuffersInArena) {
      c.parameterBytes += inFlightShards - gradientBucketBytes(l) + keptGathered;
      keptGathered = 0;
      c.gradientBytes += gradientBucketBytes(l);
    }
    // The zero-bubble kinds' count from their orders, built once per shape (cached; a search
    // meets each shape many times); 1F1B and interleaved in closed form.
    ScheduleKind kind = l.pipelineSchedule();
    double inFlight = double(peakInFlight({l.pp, l.vpp, m}, index, ScheduleKind::oneFOneB));
    if (l.pp > 1 && schedule::splitsBackward(kind))
      if (const Pipeline &pipe = pipeline(kind, l.pp, l.vpp, m); pipe.error.empty())
        inFlight = double(pipe.stagePeakInFlight[static_cast<size_t>(index)]);
    double transient;
    if (l.recompute == Recompute::full) {
      // megac's full recompute (docs/pipeline.md) stashes each chunk's input only (with
      // pp = vpp = 1: each block's input) and recomputes the whole chunk in its backward, so
      // the chunk's un-recomputed activations exist once, transiently.
      // Megatron checkpoints every layer's input (--recompute-num-layers 1): one layer's
      // activations exist transiently.
      bool perLayer = l.pp * l.vpp == 1 || stack_.recomputePerLayer;
      // A stack that defers a chunk's weight gradients to its backward's end keeps the
      // recomputed activations of the whole chunk live there whatever is stashed.
      c.activationBytes = inFlight * residual * (perLayer ? double(layersPerChunk) : 1.0);
      // (ZeRO-2/3 reduce-scatter each block's gradients as they are made: no deferral.)
      bool deferred = stack_.deferredWeightGradients && l.zero < 2;
      transient = (perLayer && !deferred ? 1.0 : double(layersPerChunk)) * none;
    } else {
      c.activationBytes = inFlight * double(layersPerChunk) * kept;
      transient = none; // the block being differentiated: its gradients and recomputed values
      // A backward that frees each block's stash as its gradients are made, without deferred
      // weight gradients, peaks at its start: the stash and the logits' gradient.
      bool deferred = stack_.deferredWeightGradients && l.zero < 2;
      if (stack_.backwardPeaksAtItsStart && !deferred)
        transient = 0;
    }
    // megac's pipeline runner holds the stashes outside the arena, and the backward reads one
    // micro-batch's as pinned inputs: that one is held twice.
    bool pipelined = l.pp * l.vpp > 1;
    if (stack_.stashCopiedIntoArena && pipelined)
      c.activationBytes +=
          l.recompute == Recompute::full ? residual : double(layersPerChunk) * kept;
    // Left out: megac stashes the forward's bf16/fp16 weight casts for the backward, one copy
    // per micro-batch in flight (docs/planner.md, Known gaps); the parameters' 2 bytes count one.
    // ZeRO-2/3's buffers in megac's arena are dead at the backward's peak: only what exceeds
    // that peak's transient counts.
    if (stack_.shardedBuffersInArena)
      transient = std::max(transient, inFlightShards);
    // Workspace: the device's reserve, the transient above, cp's K/V in flight, and on the last
    // stage the fp32 logits of one micro-batch and their gradient.
    c.workspaceBytes =
        cluster_.device.reservedBytes + transient + keptGathered + cpKv + (last ? 2 * logits : 0);
    // Left out: megac's ZeRO-1/2 apply_gradients all-gathers the updated fp32 parameters whole
    // into its arena in one buffer, plus their slice back (8 bytes a stage parameter, above the
    // backward's peak only for small activations; docs/planner.md, Known gaps).
    // Without ZeRO, megac's apply_gradients concatenates each bucket of the stage's gradients
    // (Megatron's default max(4e7, 1e6 x dp) elements, passes/training/TrainingOptimizer.cpp)
    // into one buffer and all-reduces it over dp x cp into another: its peak, above the
    // backward's where the activations are small (a sequence split over cp ranks).
    if (stack_.concatenatedGradientReduction && l.zero == 0 && l.dp * l.cp > 1) {
      double bucket = std::max(4e7, 1e6 * double(l.dp)) * pb.gradient;
      double reduction = 2 * std::min(c.gradientBytes, bucket);
      c.workspaceBytes = std::max(c.workspaceBytes, reduction - c.activationBytes);
    }
    c.totalBytes = c.parameterBytes + c.gradientBytes + c.optimizerBytes + c.activationBytes +
                   c.workspaceBytes;
  };
  StepCost a, b;
  stage(0, a);
  stage(l.pp - 1, b);
  const StepCost &worst = b.totalBytes > a.totalBytes ? b : a;
  cost.parameterBytes = worst.parameterBytes;
  cost.gradientBytes = worst.gradientBytes;
  cost.optimizerBytes = worst.optimizerBytes;
  cost.activationBytes = worst.activationBytes;
  cost.workspaceBytes = worst.workspaceBytes;
  cost.totalBytes = worst.totalBytes;
  cost.fits = cost.totalBytes <= cluster_.device.memoryBytes;
}

std::optional<StepCost> StepEstimator::memory(const Layout &l, std::string *why) {
  if (!validate(l, why))
    return std::nullopt;
  StepCost cost;
  fillMemory(l, cost);
  return cost;
}

} // namespace megac::planner
