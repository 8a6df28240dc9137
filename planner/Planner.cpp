// One training step's predicted time and memory under a layout (planner/Planner.h's estimate),
// assembled from planner/CostModel.h's pieces (memory: planner/MemoryModel.cpp). Model assumptions
// are stated where they are used.
#include "planner/CostModel.h"
#include "planner/OptimizerKernels.h"
#include "support/Checked.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace megac::planner {
namespace {

// The most micro-batches per step the planner simulates: a pipeline schedule holds about
// 2*m*vpp steps per stage, so an unbounded m (a global batch of 10^12) exhausted memory.
constexpr int64_t kMaxMicroBatchesPerStep = int64_t(1) << 16;

// Without SP the norms, residual adds and the tensors around them are replicated over tp: two
// LayerNorms (scale and bias) and the two row-parallel biases, or two RMSNorm scales.
int64_t replicatedLayerParameters(const TransformerShape &s) {
  return s.biases ? 6 * s.hidden : 2 * s.hidden;
}

// Parameter tensors of one block: q, k, v, projection and the MLP's matrices (with their
// biases), two norms (scale, and LayerNorm's bias). An MoE block: the router, and each expert
// matrix stacked over the experts in one tensor (megac's [E, ffn, h]; Megatron's grouped GEMM
// weights are as many tensors as local experts, which a multi-tensor optimizer does not see).
double tensorsPerBlock(const TransformerShape &s) {
  double matrices = 4 + (s.gatedMlp ? 3 : 2) + (s.experts > 0 ? 1 : 0);
  return matrices * (s.biases ? 2 : 1) + (s.biases ? 4 : 2);
}

PassCost passCost(const PassKernels &pass, const KernelModel &kernels, const Cluster &cluster,
                  int64_t tp, int64_t ep, int64_t cp) {
  PassCost c;
  c.compute = kernels.time(pass.kernels);
  for (const CommOp &op : pass.tp)
    c.tp[int(op.kind)] += collectiveSeconds(cluster, op.kind, tp, 1, op.bytes);
  // The ep group: ep consecutive data-parallel ranks, tp apart (Megatron's tp-cp-ep-dp-pp).
  for (const CommOp &op : pass.ep)
    c.ep += collectiveSeconds(cluster, op.kind, ep, tp, op.bytes);
  // The cp group: cp ranks tp apart (Megatron's order), inside a node while tp·cp fits in one.
  // The all-gather-kv variant blocks. A ring's step sends one block to the next rank while
  // attention runs on the block already here; overlapped, a transfer is exposed only by what it
  // outlasts of one step's attention (the pass's attention core over cp steps).
  for (const CommOp &op : pass.cp)
    c.cp += collectiveSeconds(cluster, op.kind, cp, tp, op.bytes);
  if (pass.cpRingTransfers + pass.cpRingBlockingTransfers > 0) {
    bool crossNode = placeGroup(cluster, cp, tp).nodes > 1; // the ring's slowest hop
    double transfer = p2pSeconds(cluster, crossNode, pass.cpRingBytes);
    double steps = pass.cpRingSteps > 0 ? pass.cpRingSteps : double(cp);
    double hidden = kernels.stack().overlapContextParallelRing ? c.compute.attention / steps : 0.0;
    c.cp += pass.cpRingTransfers * std::max(0.0, transfer - hidden) +
            pass.cpRingBlockingTransfers * transfer;
  }
  return c;
}

} // namespace

int64_t peakInFlight(const PipelineShape &shape, int64_t stage, ScheduleKind kind) {
  if (schedule::splitsBackward(kind)) {
    PipelineShape placed = shape;
    placed.placement = schedule::placementOf(kind);
    if (auto steps = buildSchedule(kind, placed, nullptr)) {
      ScheduleSimulation sim = simulateSchedule(placed, *steps, schedule::StepCosts{1, 1, 1});
      if (sim.error.empty())
        return sim.stagePeakInFlight[static_cast<size_t>(stage)];
    }
  }
  // Megatron's warm-up lengths, as planner/PipelineSchedule.cpp generates them: a stage holds
  // its warm-up forwards plus the one of the first steady 1F1B pair.
  int64_t p = shape.stages, v = shape.virtualStages, total = shape.microBatches * v;
  int64_t warmup = v > 1 ? (p - stage - 1) * 2 + (v - 1) * p : p - stage - 1;
  return std::min(warmup + 1, total);
}

StepEstimator::StepEstimator(const TransformerShape &shape, const Cluster &cluster,
                             int64_t globalBatch, const StackProfile &stack)
    : shape_(shape), cluster_(cluster), stack_(stack), globalBatch_(globalBatch) {
  if (shape_.kvHeads <= 0)
    shape_.kvHeads = shape_.heads;
  if (shape_.ffn <= 0)
    shape_.ffn = 4 * shape_.hidden;
}

bool StepEstimator::validate(const Layout &l, std::string *why) const {
  auto fail = [&](std::string message) {
    if (why)
      *why = std::move(message);
    return false;
  };
  const TransformerShape &s = shape_;
  if (s.layers < 1 || s.hidden < 1 || s.heads < 1 || s.seq < 1 || s.vocab < 1)
    return fail("model shape needs positive layers, hidden, heads, seq and vocab");
  if (globalBatch_ < 1)
    return fail("global batch must be positive");
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.vpp < 1 || l.microBatch < 1 || l.cp < 1)
    return fail("tp, pp, dp, cp, vpp and micro-batch must be positive");
  if (l.ranks() != cluster_.devices())
    return fail((l.cp > 1 ? "tp*cp*pp*dp = " : "tp*pp*dp = ") + std::to_string(l.ranks()) +
                " but the cluster has " + std::to_string(cluster_.devices()) + " devices");
  if (l.cp > 1) {
    if (!stack_.supportsContextParallel)
      return fail("the " + stack_.name + " stack has no context parallelism; use cp 1");
    if (!stack_.contextParallelComposes && (l.pp > 1 || l.ep > 1 || l.zero > 0))
      return fail("the " + stack_.name + " stack runs cp with tp and dp only so far (pp " +
                  std::to_string(l.pp) + ", ep " + std::to_string(l.ep) + ", zero " +
                  std::to_string(l.zero) +
                  "; docs/context-parallel.md); use cp 1, or pp 1, ep 1 and zero 0 with cp");
    if (s.seq % (2 * l.cp))
      return fail("cp " + std::to_string(l.cp) + " needs the sequence " + std::to_string(s.seq) +
                  " divisible by 2*cp = " + std::to_string(2 * l.cp) +
                  " (two load-balanced chunks per rank); use a cp whose double divides it");
  }
  if (s.heads % l.tp)
    return fail("tp " + std::to_string(l.tp) + " does not divide the " + std::to_string(s.heads) +
                " attention heads");
  if (s.kvHeads % l.tp && !stack_.replicatesKvHeads)
    return fail("tp " + std::to_string(l.tp) + " does not divide the " + std::to_string(s.kvHeads) +
                " key/value heads, and " + stack_.name +
                " keeps whole kv heads per rank (megac's own stack replicates them); use a tp "
                "that divides " +
                std::to_string(s.kvHeads));
  if (kvReplicas(s, l.tp) == 0)
    return fail("tp " + std::to_string(l.tp) + " cannot replicate the " +
                std::to_string(s.kvHeads) +
                " key/value heads to a multiple of tp that divides the " + std::to_string(s.heads) +
                " query heads");
  if (s.ffn % l.tp)
    return fail("tp " + std::to_string(l.tp) + " does not divide the MLP size " +
                std::to_string(s.ffn));
  std::optional<int64_t> dpTimesB = checkedMul(l.dp, l.microBatch);
  if (!dpTimesB || *dpTimesB > globalBatch_)
    return fail("dp*micro-batch = " + std::to_string(l.dp) + "*" + std::to_string(l.microBatch) +
                " exceeds the global batch " + std::to_string(globalBatch_));
  if (globalBatch_ % (l.dp * l.microBatch))
    return fail("dp*micro-batch = " + std::to_string(l.dp * l.microBatch) +
                " does not divide the global batch " + std::to_string(globalBatch_));
  if (l.pp * l.vpp > s.layers)
    return fail("pp*vpp = " + std::to_string(l.pp * l.vpp) + " chunks but only " +
                std::to_string(s.layers) + " layers");
  int64_t m = globalBatch_ / (l.dp * l.microBatch);
  if (m > kMaxMicroBatchesPerStep)
    return fail("global batch " + std::to_string(globalBatch_) +
                " / (dp*micro-batch = " + std::to_string(l.dp * l.microBatch) + ") is " +
                std::to_string(m) + " micro-batches per step, more than the " +
                std::to_string(kMaxMicroBatchesPerStep) +
                " the planner simulates; use a larger --micro-batch or a smaller --global-batch");
  if (l.vpp > 1 && (l.pp == 1 || m % l.pp))
    return fail("vpp " + std::to_string(l.vpp) + " needs pp > 1 and the " + std::to_string(m) +
                " micro-batches divisible by pp " + std::to_string(l.pp));
  if (l.pp > 1 && schedule::splitsBackward(l.schedule)) {
    const char *name = schedule::scheduleName(l.schedule);
    if (!stack_.zeroBubbleSchedules)
      return fail(std::string("the ") + stack_.name + " stack has no zero-bubble schedules; " +
                  "use --schedule 1f1b (" + name + " runs on megac's own stack)");
    // The schedule library's rules (parallel/PipelineSchedule.h, buildSchedule), checked here
    // without building the steps: memory() runs this for every layout the search meets.
    int64_t vpp = l.schedule == ScheduleKind::zbv ? 2 : 1;
    if (l.vpp != vpp)
      return fail(std::string("pipeline schedule '") + name + "' runs " +
                  (vpp == 2 ? "two chunks per stage in V order: vpp must be 2"
                            : "one chunk per stage: vpp must be 1") +
                  ", got " + std::to_string(l.vpp));
    if (m < l.pp)
      return fail(std::string("pipeline schedule '") + name + "' needs micro-batches >= pp: " +
                  std::to_string(m) + " < " + std::to_string(l.pp) +
                  "; use a smaller --micro-batch or a larger --global-batch");
  }
  // Keeping the forward's gathers for the backward needs both in one function: pipeline chunks
  // run them as two and gather in each (docs/training-step.md, "Reshard after forward").
  if (!l.reshardAfterForward && (l.zero != 3 || l.pp * l.vpp > 1))
    return fail("reshard-after-forward off keeps ZeRO-3's gathered parameters from the forward "
                "to the backward of one function: it needs zero 3 and pp = vpp = 1, got zero " +
                std::to_string(l.zero) + ", pp " + std::to_string(l.pp) + ", vpp " +
                std::to_string(l.vpp));
  if (l.sequenceParallel && (l.tp == 1 || s.seq % l.tp))
    return fail("sequence parallelism needs tp > 1 dividing the sequence " + std::to_string(s.seq));
  if (l.zero < 0 || l.zero > 3)
    return fail("zero must be 0, 1, 2 or 3, not " + std::to_string(l.zero));
  if (l.zero >= 2 && l.dp == 1)
    return fail("zero " + std::to_string(l.zero) + " shards gradients" +
                (l.zero == 3 ? " and parameters" : "") +
                " over the data-parallel ranks, but dp = 1; use zero 0 or a dp > 1");
  if (l.ep < 1)
    return fail("ep must be positive");
  if (l.ep > 1) {
    if (s.experts == 0)
      return fail("ep " + std::to_string(l.ep) + " needs a mixture-of-experts model; " + s.name +
                  " is dense");
    if (!stack_.supportsExpertParallel)
      return fail("the " + stack_.name + " stack has no expert parallelism; use ep 1");
    if (l.dp % l.ep)
      return fail("ep " + std::to_string(l.ep) + " does not divide dp " + std::to_string(l.dp) +
                  " (expert parallelism is carved out of data parallelism)");
    if (s.experts % l.ep)
      return fail("ep " + std::to_string(l.ep) + " does not divide the " +
                  std::to_string(s.experts) + " experts");
    if (l.zero && l.ep == l.dp && stack_.zeroOverExpertDataParallel)
      return fail("zero 1 with ep = dp = " + std::to_string(l.dp) + " shards nothing on " +
                  stack_.name + " (its optimizer state is sharded over dp/ep ranks); use zero 0");
  }
  return true;
}

const LayerCost &StepEstimator::layerCost(int64_t tp, int64_t b, bool sp, Precision precision,
                                          int64_t ep, int64_t cp, bool cpRing,
                                          int64_t gradientShards, int64_t parameterGathers,
                                          bool weightsInMemory) {
  cpRing = cp > 1 && stack_.runsContextParallelRing(cpRing);
  auto key = std::make_tuple(tp, b, sp, int(precision), ep, cp, cpRing, gradientShards,
                             parameterGathers, weightsInMemory, listGemms_);
  auto it = layers_.find(key);
  if (it != layers_.end())
    return it->second.first;
  // The block's and the edges' kernels for this geometry, timed once (issue 15: one block per
  // distinct tp, sequence parallelism and micro-batch; every layout with them reuses it).
  KernelModel kernels(cluster_.device, stack_, precision);
  kernels.setWeightsInMemory(weightsInMemory);
  LayerGeometry g{tp, b, sp, precision, ep, cp, cpRing, gradientShards, parameterGathers};
  BlockKernels block = blockKernels(shape_, g, stack_);
  LayerCost lc;
  lc.forward = passCost(block.forward, kernels, cluster_, tp, ep, cp);
  lc.backward = passCost(block.backward, kernels, cluster_, tp, ep, cp);
  lc.attentionCore = kernels.time(block.attentionCore);
  lc.fullRecompute = passCost(block.fullRecompute, kernels, cluster_, tp, ep, cp);
  lc.chunkLastRecompute = passCost(block.chunkLastRecompute, kernels, cluster_, tp, ep, cp);
  lc.gradAccumulation = kernels.time(block.gradAccumulation);
  auto weightKernels = [&](const PassKernels &pass) {
    std::vector<KernelOp> weight;
    for (const KernelOp &op : pass.kernels)
      if (op.weightGradient)
        weight.push_back(op);
    return kernels.time(weight);
  };
  lc.weightGradient = weightKernels(block.backward);
  EdgeKernels edges = edgeKernels(shape_, g, stack_);
  EdgeCost ec;
  ec.embedForward = passCost(edges.embedForward, kernels, cluster_, tp, ep, cp);
  ec.embedBackward = passCost(edges.embedBackward, kernels, cluster_, tp, ep, cp);
  ec.headForward = passCost(edges.headForward, kernels, cluster_, tp, ep, cp);
  ec.headBackward = passCost(edges.headBackward, kernels, cluster_, tp, ep, cp);
  ec.headRecompute = passCost(edges.headRecompute, kernels, cluster_, tp, ep, cp);
  ec.headChunkRecompute = passCost(edges.headChunkRecompute, kernels, cluster_, tp, ep, cp);
  ec.ropeTable = passCost(edges.ropeTable, kernels, cluster_, tp, ep, cp);
  ec.tiedHeadCast = passCost(edges.tiedHeadCast, kernels, cluster_, tp, ep, cp);
  ec.embedWeight = weightKernels(edges.embedBackward);
  ec.headWeight = weightKernels(edges.headBackward);
  if (!listGemms_)
    for (PassCost *p : {&lc.forward, &lc.backward, &lc.fullRecompute, &lc.chunkLastRecompute,
                        &ec.embedForward, &ec.embedBackward, &ec.headForward, &ec.headBackward,
                        &ec.headRecompute, &ec.headChunkRecompute, &ec.ropeTable, &ec.tiedHeadCast})
      p->compute.gemms.clear();
  if (!listGemms_)
    for (KernelTime *t : {&lc.attentionCore, &lc.gradAccumulation, &lc.weightGradient,
                          &ec.embedWeight, &ec.headWeight})
      t->gemms.clear();
  return layers_.emplace(key, std::make_pair(lc, ec)).first->second.first;
}

const EdgeCost &StepEstimator::edgeCost(int64_t tp, int64_t b, bool sp, Precision precision,
                                        int64_t ep, int64_t cp, bool cpRing, int64_t gradientShards,
                                        int64_t parameterGathers, bool weightsInMemory) {
  layerCost(tp, b, sp, precision, ep, cp, cpRing, gradientShards, parameterGathers,
            weightsInMemory);
  cpRing = cp > 1 && stack_.runsContextParallelRing(cpRing);
  return layers_
      .find(std::make_tuple(tp, b, sp, int(precision), ep, cp, cpRing, gradientShards,
                            parameterGathers, weightsInMemory, listGemms_))
      ->second.second;
}

const StepEstimator::Pipeline &StepEstimator::pipeline(ScheduleKind kind, int64_t pp, int64_t vpp,
                                                       int64_t m) {
  auto key = std::make_tuple(int(kind), pp, vpp, m);
  auto it = pipelines_.find(key);
  if (it != pipelines_.end())
    return it->second;
  Pipeline p;
  PipelineShape shape{pp, vpp, m, schedule::placementOf(kind)};
  if (auto steps = buildSchedule(kind, shape, &p.error))
    p.steps = std::move(*steps);
  for (const std::vector<ScheduleStep> &stage : p.steps) {
    int64_t live = 0, peak = 0;
    for (const ScheduleStep &step : stage) {
      if (step.kind == schedule::StepKind::forward)
        peak = std::max(peak, ++live);
      else if (step.kind != schedule::StepKind::backwardInput)
        --live;
    }
    p.stagePeakInFlight.push_back(peak);
  }
  return pipelines_.emplace(key, std::move(p)).first->second;
}

double StepEstimator::stageParameters(const Layout &l, bool first, bool last) const {
  const TransformerShape &s = shape_;
  double replicated = double(replicatedLayerParameters(s));
  if (s.kvHeads > 0 && s.kvHeads % l.tp != 0) // replicated kv heads: whole k/v projections
    replicated += kvProjectionParameters(s);
  double experts = expertParameters(s);
  double perLayer = (layerParameters(s) - experts - replicated) / double(l.tp) + replicated;
  double layers = double(l.vpp * ceilDiv(s.layers, l.pp * l.vpp));
  double table = double(ceilDiv(s.vocab, l.tp)) * double(s.hidden);
  double rest = nonLayerParameters(s) - double(s.vocab) * double(s.hidden) *
                                            (s.tiedEmbedding ? 1 : 2); // positions, final norm
  double edges = 0;
  if (first)
    edges += table + std::max(0.0, rest);
  // The logit layer: its own weight, or the tied table's copy on the last stage (pp > 1).
  if (last && (!first || !s.tiedEmbedding))
    edges += table;
  return layers * perLayer + edges + stageExpertParameters(l);
}

double StepEstimator::trainingStateBytes(const Layout &l) const {
  return 16.0 * std::max(stageParameters(l, true, l.pp == 1), stageParameters(l, l.pp == 1, true));
}

double StepEstimator::stageExpertParameters(const Layout &l) const {
  double layers = double(l.vpp * ceilDiv(shape_.layers, l.pp * l.vpp));
  double split = double(l.ep) * (stack_.expertTensorParallel ? double(l.tp) : 1.0);
  return layers * expertParameters(shape_) / split;
}

StepEstimator::ChunkTimes StepEstimator::chunkTimes(const Layout &l) {
  // ZeRO-2/3 reduce-scatter each micro-batch's gradients before accumulating them.
  int64_t shards = l.zero >= 2 ? denseZeroShards(l) : 1;
  // ZeRO-3 gathers each parameter before its forward and, resharded after it, again before its
  // backward (megac casts each gathered copy under mixed precision).
  int64_t gathers = l.zero == 3 && l.reshardAfterForward ? 2 : 1;
  // A step touches every weight, gradient and AdamW moment of the stage between two uses of one
  // weight: past the node's last-level cache, each weight and weight gradient streams from main
  // memory (KernelOp::coldBytes).
  const bool weightsInMemory = stateOutgrowsCache(cluster_.device, trainingStateBytes(l));
  const LayerCost &lc = layerCost(l.tp, l.microBatch, l.sequenceParallel, l.precision, l.ep, l.cp,
                                  l.cpRing, shards, gathers, weightsInMemory);
  const EdgeCost &ec = edgeCost(l.tp, l.microBatch, l.sequenceParallel, l.precision, l.ep, l.cp,
                                l.cpRing, shards, gathers, weightsInMemory);
  double layers = double(l.vpp * ceilDiv(shape_.layers, l.pp * l.vpp)); // on the stage
  // Recompute, in the backward: selective repeats the attention core, full the forward with its
  // collectives (or what of it the backward reads: BlockKernels::fullRecompute), and on the
  // last stage what the stack recomputes of the logit layer.
  PassCost recompute;
  if (l.recompute == Recompute::selective)
    recompute.compute = lc.attentionCore;
  else if (l.recompute == Recompute::full)
    recompute = lc.fullRecompute;
  // megac's pipeline chunks under full recompute stash their input only (docs/pipeline.md;
  // MemoryModel's perLayer); at pp 1 it keeps every block's input, as Megatron does.
  const bool chunkRecompute =
      l.recompute == Recompute::full && !stack_.recomputePerLayer && l.pp * l.vpp > 1;
  // Pipeline sends: the residual stream of one micro-batch (sequence-split under SP and cp),
  // once per chunk step, on the critical path (the simulation's steps wait for their input). A
  // pipeline spanning nodes runs at the pace of its inter-node boundaries.
  double sendBytes = double(l.microBatch * shape_.seq / l.cp * shape_.hidden) *
                     double(elementBytes(l.precision)) / (l.sequenceParallel ? l.tp : 1);
  double send = l.pp > 1 ? pipelineSendSeconds(l, sendBytes) : 0;
  ParameterBytes pb = parameterBytes(l.precision);
  // Per micro-batch on the first and the last stage (the busier one is the pipeline's pace;
  // with pp = 1 they are the same stage).
  auto stage = [&](bool first, bool last, double &fwd, double &bwd, double &wgt, ChunkTimes &t) {
    PassCost f = lc.forward.scaled(layers), b = lc.backward.scaled(layers);
    // W: the weight-gradient GEMMs and bias sums and the accumulation into the gradients, with
    // the embedding's and the LM head's on their stages. Not counted: MoE experts' (their
    // kernels are not marked), the edges' accumulation adds.
    wgt = lc.weightGradient.scaled(layers).total() + lc.gradAccumulation.scaled(layers).total() +
          (first ? ec.embedWeight.total() : 0) + (last ? ec.headWeight.total() : 0);
    if (chunkRecompute) {
      // Only each chunk's input is stashed: a chunk's blocks but its last repeat their whole
      // forward (the next block's input), its last what the backward reads of it; the model's
      // last block repeats all of it (the final norm reads its output), and chunk 0 its
      // embedding (its output is the first block's input).
      double chunks = double(l.vpp), whole = layers - chunks + (last ? 1 : 0);
      b += lc.forward.scaled(whole);
      b += lc.chunkLastRecompute.scaled(layers - whole);
      if (first)
        b += ec.embedForward;
      if (last)
        b += ec.headChunkRecompute;
    } else {
      b += recompute.scaled(layers);
    }
    b.compute += lc.gradAccumulation.scaled(layers);
    if (first) {
      f += ec.embedForward;
      b += ec.embedBackward;
    }
    // Every chunk's backward function builds rotary's table (chunk 0's is in embedBackward).
    if (double tables = double(l.vpp) - (first ? 1.0 : 0.0); tables > 0)
      b += ec.ropeTable.scaled(tables);
    if (last) {
      f += ec.headForward;
      if (!first)
        f += ec.tiedHeadCast;
      b += ec.headBackward;
      if (l.recompute == Recompute::full)
        b += ec.headRecompute;
    }
    // ZeRO-3 gathers the stage's parameters before each forward and again before each backward
    // (reshard after forward); ZeRO-2/3 reduce-scatter each micro-batch's gradients
    // (Megatron's and DeepSpeed's choice under accumulation: m x the gradient bytes, no whole
    // fp32 accumulator). Blocking stacks expose them whole; prefetching ones hide a layer's
    // collective behind the neighbouring layer's compute: only the first layer's, or what the
    // pass's compute cannot cover, is exposed.
    double gatherF = 0, gatherB = 0, scatter = 0;
    if (l.zero >= 2) {
      double params = stageParameters(l, first, last), experts = stageExpertParameters(l);
      scatter = zeroCollective(l, Collective::reduceScatter, params, experts, pb.gradient);
      double compute = b.compute.total();
      if (stack_.overlapGradReduce)
        scatter = std::max(scatter / layers, scatter - compute);
      if (l.zero == 3) {
        double gather = zeroCollective(l, Collective::allGather, params, experts, pb.parameter);
        gatherF = gatherB = gather;
        if (stack_.overlaps(stack_.prefetchShardedParams)) {
          gatherF = std::max(gather / layers, gather - f.compute.total());
          gatherB = std::max(gather / layers, gather - compute);
        }
        // Without reshard after forward the backward reads the forward's gathered copies: one
        // gather per layer and micro-batch, not two (their memory: fillMemory).
        if (!l.reshardAfterForward)
          gatherB = 0;
      }
      // megac (overlapShardedGradReduce): each reduce-scatter starts as its gradient is final
      // and is done at its function's end, so it runs under the rest of that chunk's backward,
      // on the link the backward's regathers also use. Exposed: what the backward's compute
      // cannot cover of both, less the regathers' exposed share, and at least each chunk
      // function's last reduce-scatters: its first block's, on the first stage the embedding
      // table's (its gradient is final last).
      if (stack_.overlaps(stack_.overlapShardedGradReduce) && !stack_.overlapGradReduce) {
        double block =
            zeroCollective(l, Collective::reduceScatter, stageParameters(l, false, false) / layers,
                           experts / layers, pb.gradient);
        double table = first ? zeroCollective(l, Collective::reduceScatter,
                                              double(ceilDiv(shape_.vocab, l.tp)) * shape_.hidden,
                                              0, pb.gradient)
                             : 0;
        double tail = double(l.vpp - 1) * block + std::max(block, table);
        double regathers =
            l.zero == 3 && l.reshardAfterForward
                ? zeroCollective(l, Collective::allGather, params, experts, pb.parameter)
                : 0;
        scatter = std::min(scatter, std::max(tail, scatter + regathers - compute - gatherB));
      }
    }
    // A host-driven pipeline engine's cost per step (StackProfile::pipelineStepOverheadSeconds)
    // rides with the sends: both are on the critical path of every chunk step.
    // megac's runtimes receive by rendezvous: a transfer runs from the later of its send and
    // its receive's posting, placed by the simulation (ChunkTimes::transfer), not added to every
    // chunk step. With --overlap on the receives are posted kReceiveLookahead steps ahead (issue
    // 29), without it at the step (ChunkTimes::receiveLookahead).
    bool placed = stack_.overlapFollowsPlan && l.pp > 1;
    t.receiveLookahead = stack_.latencyHiding ? schedule::kReceiveLookahead : 0;
    t.transfer = placed ? send : 0;
    double sends =
        double(l.vpp) * ((placed ? 0 : send) + (l.pp > 1 ? stack_.pipelineStepOverheadSeconds : 0));
    fwd = f.compute.total() + f.tpSeconds() + f.ep + f.cp + gatherF + sends;
    bwd = b.compute.total() + b.tpSeconds() + b.ep + b.cp + gatherB + scatter + sends;
    t.compute = f.compute.total() + b.compute.total();
    t.tp = f.tpSeconds() + b.tpSeconds();
    t.ep = f.ep + b.ep;
    t.cp = f.cp + b.cp;
    t.zeroGather = gatherF + gatherB;
    t.zeroReduceScatter = scatter;
    t.pp = 2 * sends;
    t.split = f;
    t.split += b;
  };
  ChunkTimes first, last;
  double f0, b0, w0, f1, b1, w1;
  stage(true, l.pp == 1, f0, b0, w0, first);
  stage(l.pp == 1, true, f1, b1, w1, last);
  ChunkTimes &busy = f1 + b1 >= f0 + b0 ? last : first;
  busy.forward = (f1 + b1 >= f0 + b0 ? f1 : f0) / double(l.vpp);
  busy.backward = (f1 + b1 >= f0 + b0 ? b1 : b0) / double(l.vpp);
  busy.weight = std::min(busy.backward, (f1 + b1 >= f0 + b0 ? w1 : w0) / double(l.vpp));
  busy.transfer = first.transfer;
  busy.receiveLookahead = first.receiveLookahead;
  busy.firstStage = first.split.compute;
  busy.lastStage = last.split.compute;
  if (l.pp > 2 && listGemms_) { // never the busiest (no embedding, no head): reported only
    ChunkTimes middle;
    double f2, b2, w2;
    stage(false, false, f2, b2, w2, middle);
    busy.middleStage = middle.split.compute;
  }
  return busy;
}

double StepEstimator::zeroCollective(const Layout &l, Collective kind, double params,
                                     double experts, double bytesPerParameter) const {
  // Dense parameters over the dense shards (ranks tp apart, or tp·ep apart when sharded over the
  // dp/ep axis), the experts over the ranks holding the same experts (tp·ep apart).
  int64_t dense = denseZeroShards(l);
  return collectiveSeconds(cluster_, kind, dense, dense == l.dp * l.cp ? l.tp : l.tp * l.ep,
                           (params - experts) * bytesPerParameter) +
         collectiveSeconds(cluster_, kind, expertZeroShards(l), l.tp * l.ep,
                           experts * bytesPerParameter);
}

double StepEstimator::pipelineSendSeconds(const Layout &l, double bytes) const {
  bool crossNode = cluster_.nodes > 1;
  double seconds;
  if (stack_.p2pScatterGather && l.tp > 1 && !l.sequenceParallel && crossNode) {
    // Megatron's scatter/gather optimisation (Narayanan et al. SC21, section 4.1): each of the
    // tp ranks sends 1/tp of the activation over its own NIC, then an all-gather on NVLink.
    seconds = p2pSeconds(cluster_, true, bytes / double(l.tp)) +
              collectiveSeconds(cluster_, Collective::allGather, l.tp, 1, bytes);
  } else {
    seconds = p2pSeconds(cluster_, crossNode, bytes);
  }
  // Staged through host memory: a device-to-host copy before and a host-to-device copy after.
  if (stack_.p2pThroughHost && cluster_.device.hostBandwidth > 0)
    seconds += 2 * bytes / cluster_.device.hostBandwidth;
  return seconds;
}

KernelTime StepEstimator::optimizerTime(const Layout &l, double localParameters,
                                        double localExperts, bool withUpdate) const {
  // ZeRO-1 updates 1/dp of the local parameters (of the experts, 1/(dp/ep): their optimizer
  // state is sharded over the ranks that hold the same experts); one kernel per parameter
  // tensor unless the stack has a multi-tensor optimizer.
  double updated = (localParameters - localExperts) / double(l.zero ? denseZeroShards(l) : 1) +
                   localExperts / double(l.zero ? expertZeroShards(l) : 1);
  // The global norm's groups (mesh axes a gradient is split over): the replicated gradients,
  // the tp-split ones, the experts' (split over ep); ZeRO adds dp to every group alike and the
  // norm reads the shards.
  NormGroups norm;
  norm.groups = 1 + (l.tp > 1 ? 1 : 0) + (l.ep > 1 && shape_.experts > 0 ? 1 : 0);
  norm.parameters = updated;
  if (!withUpdate)
    updated = 0;
  double perBlock = tensorsPerBlock(shape_);
  // Outside the blocks: the embedding table (and an untied head), learned positions and the
  // final norm (scale, and LayerNorm's bias).
  const TransformerShape &s = shape_;
  double edges = (s.tiedEmbedding ? 1 : 2) + (s.rope ? 0 : 1) + (s.biases ? 2 : 1);
  double tensors = double(l.vpp * ceilDiv(shape_.layers, l.pp * l.vpp)) * perBlock + edges;
  // Sequence parallelism: the blocks' norms and row-parallel biases, the final norm and a
  // learned position table are whole on every tp rank, their gradients partial.
  TpReplicatedGradients replicated;
  if (l.sequenceParallel && l.tp > 1) {
    double blocks = double(l.vpp * ceilDiv(shape_.layers, l.pp * l.vpp));
    replicated.parameters =
        blocks * double(replicatedLayerParameters(s)) + double(s.hidden) * (s.biases ? 2 : 1);
    replicated.tensors = blocks * (s.biases ? 6 : 2) + (s.biases ? 2 : 1);
    replicated.alone = s.rope ? 0 : 1;
    if (s.experts > 0 && !stack_.expertTensorParallel && l.ep == 1) {
      // Whole experts on every tp rank, each fed its own T/tp tokens: their gradients are
      // partial over tp too, reduced with the norms (megac). Under ep > 1 they are reduced over
      // dp and tp in a group of their own (concatenated apart: optimizerKernels).
      replicated.parameters += localExperts;
      replicated.tensors += blocks * (s.gatedMlp ? 3 : 2);
    }
  }
  KernelModel kernels(cluster_.device, stack_, l.precision);
  kernels.setWeightsInMemory(stateOutgrowsCache(cluster_.device, trainingStateBytes(l)));
  return kernels.time(optimizerKernels(localParameters, tensors, updated, l.precision, stack_,
                                       l.ranks() > 1, l.dp * l.cp > 1, l.zero, replicated,
                                       l.ep > 1 ? localExperts : 0, norm));
}

double StepEstimator::lowerBoundSeconds(const Layout &l) {
  ChunkTimes ct = chunkTimes(l);
  int64_t m = globalBatch_ / (l.dp * l.microBatch);
  double local = std::max(stageParameters(l, true, l.pp == 1), stageParameters(l, l.pp == 1, true));
  return double(m) *
             (ct.compute + ct.tp + ct.pp + ct.ep + ct.cp + ct.zeroGather + ct.zeroReduceScatter) +
         optimizerTime(l, local, stageExpertParameters(l)).total();
}

std::optional<StepCost> StepEstimator::estimate(const Layout &l, std::string *why) {
  if (!validate(l, why))
    return std::nullopt;
  StepCost c;
  fillMemory(l, c);
  int64_t m = globalBatch_ / (l.dp * l.microBatch);
  ChunkTimes ct = chunkTimes(l);
  c.computeSeconds = double(m) * ct.compute;
  c.tpCommSeconds = double(m) * ct.tp;
  c.ppCommSeconds = double(m) * ct.pp;
  c.epCommSeconds = double(m) * ct.ep;
  c.cpCommSeconds = double(m) * ct.cp;
  c.zeroGatherSeconds = double(m) * ct.zeroGather;
  c.zeroReduceScatterSeconds = double(m) * ct.zeroReduceScatter;
  c.chunkForwardSeconds = ct.forward;
  c.chunkBackwardSeconds = ct.backward;
  c.chunkWeightSeconds = ct.weight;
  double busy = c.computeSeconds + c.tpCommSeconds + c.ppCommSeconds + c.epCommSeconds +
                c.cpCommSeconds + c.zeroGatherSeconds + c.zeroReduceScatterSeconds;
  double makespan = busy;
  if (l.pp > 1) {
    ScheduleKind kind = l.pipelineSchedule();
    const Pipeline &pipe = pipeline(kind, l.pp, l.vpp, m);
    if (!pipe.error.empty()) {
      if (why)
        *why = pipe.error;
      return std::nullopt;
    }
    // Every chunk step costs the busiest stage's average (the schedule runs at its pace); a
    // zero-bubble schedule runs B = backward - W and W as two steps.
    schedule::StepCosts costs{ct.forward, ct.backward, 0.0};
    if (schedule::splitsBackward(kind))
      costs = {ct.forward, ct.backward - ct.weight, ct.weight};
    ScheduleSimulation sim =
        simulateSchedule({l.pp, l.vpp, m, schedule::placementOf(kind)}, pipe.steps,
                         schedule::PipelineCosts{{costs}, ct.transfer, ct.receiveLookahead});
    if (!sim.error.empty()) {
      if (why)
        *why = sim.error;
      return std::nullopt;
    }
    makespan = std::max(busy, sim.makespan);
  }
  c.bubbleSeconds = makespan - busy;

  // Data parallel: the stage's gradients (fp32 for bf16, REFERENCE.md) reduced over the dp x cp
  // group (ranks tp apart); ZeRO-1 reduce-scatters them and all-gathers the updated parameters.
  // ZeRO-2/3 reduce-scatter every micro-batch inside the chunks (chunkTimes), so nothing is
  // left after the backward; ZeRO-3 keeps its parameters sharded (no all-gather after the step:
  // the next forward's gathers are charged in the chunks).
  // With the stack's overlap (Megatron-Core's --overlap-grad-reduce) the reduction is issued
  // bucket by bucket during the last micro-batch's backward and hides behind it except the last
  // bucket (one block's share); without it (Megatron 2021, megac) it follows the backward. The
  // ZeRO all-gather overlaps the next forward only with --overlap-param-gather.
  ParameterBytes pb = parameterBytes(l.precision);
  double local = std::max(stageParameters(l, true, l.pp == 1), stageParameters(l, l.pp == 1, true));
  // MoE: the experts' gradients are reduced over the dp/ep ranks holding the same experts
  // (ranks tp·ep apart), the rest over dp. Megac runs whole experts on the sequence shards of
  // its tensor-parallel ranks (SP), so their gradients are summed over tp as well.
  double experts = stageExpertParameters(l);
  Collective reduceKind = l.zero ? Collective::reduceScatter : Collective::allReduce;
  int64_t dpcp = l.dp * l.cp;
  double reduce =
      collectiveSeconds(cluster_, reduceKind, dpcp, l.tp, (local - experts) * pb.gradient) +
      collectiveSeconds(cluster_, reduceKind, expertZeroShards(l), l.tp * l.ep,
                        experts * pb.gradient);
  if (l.zero && denseZeroShards(l) != dpcp) // dense: reduce-scattered over dp/ep, summed over ep
    reduce = collectiveSeconds(cluster_, reduceKind, expertZeroShards(l), l.tp * l.ep,
                               (local - experts) * pb.gradient) +
             collectiveSeconds(cluster_, Collective::allReduce, l.ep, l.tp,
                               (local - experts) * pb.gradient / double(expertZeroShards(l))) +
             collectiveSeconds(cluster_, reduceKind, expertZeroShards(l), l.tp * l.ep,
                               experts * pb.gradient);
  if (l.zero >= 2)
    reduce = 0;
  if (experts > 0 && !stack_.expertTensorParallel && l.sequenceParallel)
    reduce += collectiveSeconds(cluster_, Collective::allReduce, l.tp, 1, experts * pb.gradient);
  double lastBackward = double(l.vpp) * ct.backward;
  double blocks = double(l.vpp * ceilDiv(shape_.layers, l.pp * l.vpp));
  double exposed = reduce;
  if (stack_.overlapGradReduce && reduce > 0)
    exposed = std::max(reduce / blocks, reduce - lastBackward);
  KernelTime optimizer = optimizerTime(l, local, experts);
  // megac (overlapFollowsPlan): only `--overlap on` at pp 1 and ZeRO 0/1/2 over more than one
  // bucket overlaps (passes/training/TrainingPipeline.cpp fuses the last micro-batch with the
  // update at one chunk; the buckets as TrainingOptimizer.cpp cuts them). Each bucket's reduction
  // is issued as its gradients become final (each weight-gradient GEMM next to its layer,
  // mega-training-gemm-fusion), so all hide behind the last backward where it is long enough
  // (the link shared: the reduction's remainder otherwise) except the tail: the last bucket's,
  // whose gradients are final when the backward ends, hidden behind the work on the other
  // buckets' results that the tail's order puts ahead of its done (their unpacking and the
  // global norm's squares: the optimizer step without AdamW; mega-schedule-latency-hiding,
  // measured on an emulated shared link, docs/training-step.md);
  // ZeRO-1/2's all-gathers are deferred into the next step's first micro-batch
  // (mega-training-defer-parameter-gather): all start at its top, in the order its forward needs
  // the buckets, and each is done before its first layer, so the first bucket's gather and what
  // exceeds that forward are exposed (ZeRO-2 has no reduction here: its reduce-scatters are in
  // the chunks).
  double buckets = 1;
  if (stack_.overlapFollowsPlan && stack_.latencyHiding && l.pp == 1 && l.vpp == 1 && l.zero <= 2) {
    int64_t size =
        stack_.bucketSize > 0 ? stack_.bucketSize : std::max<int64_t>(40000000, 1000000 * l.dp);
    buckets = std::ceil(local / double(size));
  }
  if (buckets > 1 && reduce > 0) {
    double beforeLastDone =
        optimizerTime(l, local, experts, false).total() * (buckets - 1) / buckets;
    exposed = std::max({reduce / buckets - beforeLastDone, reduce - lastBackward, 0.0});
  }
  double gather = 0;
  if (l.zero == 1 || l.zero == 2) {
    gather = zeroCollective(l, Collective::allGather, local, experts, pb.parameter);
    if (stack_.overlapParamGather)
      gather /= blocks;
    else if (buckets > 1)
      gather = std::max(gather / buckets, gather - double(l.vpp) * ct.forward);
  }
  // A tied embedding's gradient is summed between the first and last stage (send/recv).
  if (l.pp > 1 && shape_.tiedEmbedding)
    gather += p2pSeconds(cluster_, cluster_.nodes > 1,
                         double(ceilDiv(shape_.vocab, l.tp)) * shape_.hidden * pb.gradient);
  c.dpReduceSeconds = exposed;
  c.dpGatherSeconds = gather;
  c.dpCommSeconds = exposed + gather;
  c.optimizerSeconds = optimizer.total();
  c.stepSeconds = makespan + c.dpCommSeconds + c.optimizerSeconds;
  KernelTime kernels = ct.split.compute.scaled(double(m));
  kernels += optimizer;
  c.gemmSeconds = kernels.gemm;
  c.attentionSeconds = kernels.attention;
  c.memoryBoundSeconds = kernels.memory;
  c.overheadSeconds = kernels.overhead;
  for (int i = 0; i < kKernelClassCount; ++i)
    if (kernels.launches[size_t(i)] > 0) {
      c.kernelLaunches.push_back({kernelClassName(KernelClass(i)), kernels.launches[size_t(i)]});
      c.kernelSeconds.push_back({kernelClassName(KernelClass(i)), kernels.seconds[size_t(i)]});
      c.kernelBytes.push_back({kernelClassName(KernelClass(i)), kernels.bytes[size_t(i)]});
    }
  c.gemmShapes = mergeGemmShapes(kernels.gemms);
  if (l.pp > 1) {
    // One micro-batch's kernels of a stage, times the micro-batches, as the stage lists them.
    auto inventory = [&](const KernelTime &perMicroBatch) {
      KernelTime t = perMicroBatch.scaled(double(m));
      StageInventory s;
      s.gemms = mergeGemmShapes(t.gemms);
      for (int i = 0; i < kKernelClassCount; ++i)
        if (t.launches[size_t(i)] > 0) {
          s.launches.push_back({kernelClassName(KernelClass(i)), t.launches[size_t(i)]});
          s.bytes.push_back({kernelClassName(KernelClass(i)), t.bytes[size_t(i)]});
        }
      return s;
    };
    c.firstStage = inventory(ct.firstStage);
    c.lastStage = inventory(ct.lastStage);
    if (l.pp > 2)
      c.middleStage = inventory(ct.middleStage);
  }
  c.tpAllReduceSeconds = double(m) * ct.split.tp[int(Collective::allReduce)];
  c.tpAllGatherSeconds = double(m) * ct.split.tp[int(Collective::allGather)];
  c.tpReduceScatterSeconds = double(m) * ct.split.tp[int(Collective::reduceScatter)];

  double devices = double(cluster_.devices());
  // A calibrated CPU spec's peak is a 1-thread rank's; a layout's ranks run its occupancy, whose
  // tables also say whether the cold weights were charged (the report says what was costed).
  double peak = peakFlops(cluster_.device, l.precision);
  c.trainingStateBytes = trainingStateBytes(l);
  const DeviceSpec &device = cluster_.device;
  if (!device.calibration.occupancies.empty() || device.cacheBytes > 0) {
    KernelModel rank(device, stack_, l.precision);
    rank.setWeightsInMemory(stateOutgrowsCache(device, c.trainingStateBytes));
    c.weightsInMemory = rank.chargesColdOperands();
    if (!device.calibration.occupancies.empty())
      peak = rank.rankPeakFlops();
  }
  c.tokensPerSecond = double(globalBatch_ * shape_.seq) / c.stepSeconds;
  c.hardwareTflopsPerGpu =
      hardwareFlopsPerStep(shape_, globalBatch_, l.recompute) / c.stepSeconds / devices / 1e12;
  c.mfu = modelFlopsPerStep(shape_, globalBatch_) / c.stepSeconds / (devices * peak);

  std::vector<std::pair<double, const char *>> parts = {
      {c.computeSeconds, "compute"},
      {c.tpCommSeconds, "tensor-parallel comm"},
      {c.epCommSeconds, "expert-parallel token exchange"},
      {c.cpCommSeconds, "context-parallel K/V exchange"},
      {c.zeroGatherSeconds, "ZeRO-3 parameter gathers"},
      {c.zeroReduceScatterSeconds, "ZeRO-2/3 gradient reduce-scatters"},
      {c.bubbleSeconds, "pipeline bubble"},
      {c.ppCommSeconds, "pipeline sends"},
      {c.dpCommSeconds, "data-parallel comm"},
      {c.optimizerSeconds, "optimizer"}};
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto &a, const auto &b) { return a.first > b.first; });
  for (const auto &[seconds, name] : parts) {
    double percent = 100 * seconds / c.stepSeconds;
    if (percent < 0.5)
      continue;
    char text[64];
    std::snprintf(text, sizeof text, "%s %.0f%%", name, percent);
    c.dominant.push_back(text);
  }
  return c;
}

StackProfile defaultStack(const Cluster &cluster) {
  // CPU devices: the preset, or a spec `megac calibrate --backend cpu` wrote (it records the
  // threads per rank; the CUDA calibration does not).
  const DeviceSpec &d = cluster.device;
  return *stackProfile("megac", d.name == "cpu" || d.calibration.threads > 0);
}

std::optional<StepCost> estimate(const TransformerShape &shape, const Cluster &cluster,
                                 int64_t globalBatch, const Layout &layout, std::string *why,
                                 const StackProfile &stack) {
  StepEstimator estimator(shape, cluster, globalBatch, stack);
  estimator.listGemms(true);
  return estimator.estimate(layout, why);
}

} // namespace megac::planner
