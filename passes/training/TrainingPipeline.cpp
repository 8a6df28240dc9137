// The training phase's pass pipeline (TrainingPipeline.h).
#include "passes/training/TrainingPipeline.h"
#include "passes/partition/Passes.h"
#include "passes/schedule/Passes.h"
#include "passes/training/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

namespace megac::passes {

const char *lossKindName(LossKind kind) {
  switch (kind) {
  case LossKind::causal:
    return "causal";
  case LossKind::mlm:
    return "mlm";
  case LossKind::seq2seq:
    return "seq2seq";
  }
  return "causal";
}

mlir::LogicalResult buildTrainingStep(mlir::ModuleOp module, const TrainingOptions &options) {
  mlir::PassManager pm(module->getContext());
  TrainingPrecisionOptions precision;
  precision.precision = precisionName(options.layout.precision);
  // fp64 converts the model itself (so @forward is f64 too); bf16/fp16 rewrite the forward half
  // of @forward_backward before autodiff, which then follows its casts.
  bool mixed =
      options.layout.precision == Precision::bf16 || options.layout.precision == Precision::fp16;
  if (options.layout.precision == Precision::fp64)
    pm.addPass(createTrainingPrecision(precision));
  TrainingLossOptions loss;
  loss.function = options.function;
  loss.logits = options.logits;
  loss.ignoreIndex = options.ignoreIndex;
  loss.lossKind = lossKindName(options.lossKind);
  loss.moeAuxLossCoeff = options.moeAuxLossCoeff;
  loss.moeZLossCoeff = options.moeZLossCoeff;
  pm.addPass(createTrainingLoss(loss));
  if (mixed)
    pm.addPass(createTrainingPrecision(precision));
  // Partitioning works on the forward half (docs/pipeline.md): the collectives it inserts carry
  // their own gradients, so autodiff then builds the partitioned backward pass.
  const Layout &layout = options.layout;
  int64_t chunks = layout.pp * layout.vpp;
  if (layout.partitioned()) {
    // Context parallelism: the sequence permuted for load balance, causal attention masked by
    // global positions (docs/context-parallel.md); propagation then splits it over cp.
    if (layout.cp > 1) {
      ContextParallelOptions context;
      context.cp = layout.cp;
      context.ring = layout.cpRing;
      pm.addPass(createContextParallel(context));
    }
    ShardingPropagationOptions sharding;
    sharding.tp = layout.tp;
    sharding.dp = layout.dp;
    sharding.pp = layout.pp;
    sharding.sequenceParallel = layout.sequenceParallel;
    sharding.ep = layout.ep;
    sharding.cp = layout.cp;
    pm.addPass(createShardingPropagation(sharding));
    pm.addPass(createSpmdize());
    // One copy_to_shards per value (not per use), so the backward all-reduces each once.
    pm.addPass(mlir::createCSEPass());
  }
  if (chunks > 1) {
    PipelineSplitOptions split;
    split.stages = layout.pp;
    split.virtualStages = layout.vpp;
    if (schedule::placementOf(layout.pipelineSchedule()) == schedule::ChunkPlacement::vee)
      split.placement = "vee"; // zbv: stage s holds chunks s and 2pp - 1 - s
    pm.addPass(createPipelineSplit(split));
  }
  TrainingAutodiffOptions autodiff;
  if (options.layout.precision == Precision::fp16)
    autodiff.lossScale = "loss_scale";
  pm.addPass(createTrainingAutodiff(autodiff));
  if (chunks > 1 || layout.recompute != Recompute::none) {
    ForwardBackwardSplitOptions split;
    split.recompute = recomputeName(layout.recompute);
    pm.addPass(createForwardBackwardSplit(split));
  }
  // Context parallelism: the backward all-gathers k and v again instead of keeping the
  // forward's whole copies (docs/context-parallel.md, "Memory").
  if (layout.cp > 1)
    pm.addPass(createContextParallelRegather());
  TrainingOptimizerOptions optimizer;
  optimizer.zero = layout.zero;
  optimizer.reshardAfterForward = layout.reshardAfterForward;
  optimizer.beta1 = options.beta1;
  optimizer.beta2 = options.beta2;
  optimizer.eps = options.eps;
  optimizer.weightDecay = options.weightDecay;
  optimizer.clipGrad = options.clipGrad;
  optimizer.bucketSize = options.bucketSize;
  pm.addPass(createTrainingOptimizer(optimizer));
  // One AdamW instruction per dtype, not per tensor (docs/training-step.md, "Multi-tensor
  // optimizer").
  pm.addPass(createTrainingMultiTensorOptimizer());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  // Last, on the final per-rank functions: GEMMs read transposes as flags and accumulate the
  // weight gradients in place (docs/training-step.md, "GEMM layouts and accumulation").
  pm.addPass(createTrainingGemmFusion());
  // Zero-bubble schedules: each chunk's backward as an input- and a weight-gradient function
  // (docs/pipeline.md "Zero-bubble schedules"), on the final chunk functions.
  if (chunks > 1 && schedule::splitsBackward(layout.pipelineSchedule()))
    pm.addPass(createBackwardWeightSplit());
  // With overlap and one pipeline stage: @forward_backward_apply, the last micro-batch's
  // backward and the update in one function, so the dp reduction can overlap the backward.
  if (options.overlap && chunks == 1)
    pm.addPass(createTrainingFuseLastMicroBatch());
  // ZeRO-1/2 with overlap: the updated shards' all-gathers move into the next step's forward,
  // each bucket ahead of its first use (Megatron's --overlap-param-gather).
  if (options.overlap && chunks == 1 && (layout.zero == 1 || layout.zero == 2))
    pm.addPass(createTrainingDeferParameterGather());
  // After every pass that moves or rewrites ops: the collectives' start/done placement.
  if (options.overlap)
    pm.addPass(createLatencyHiding());
  // ZeRO-3: its parameter gathers one layer ahead, not all at the top (Passes.td).
  if (options.overlap && layout.zero == 3)
    pm.addPass(createTrainingZeroPrefetch());
  return pm.run(module);
}

} // namespace megac::passes
