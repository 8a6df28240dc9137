// One training step's predicted time and memory under a layout (planner/Planner.h's estimate),
// assembled from planner/CostModel.h's pieces. Model assumptions are stated where they are used.
#include "planner/CostModel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace megac::planner {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Gemm {
  int64_t m, n, k, batch;
};

// Without SP the norms, residual adds and the tensors around them are replicated over tp: two
// LayerNorms (scale and bias) and the two row-parallel biases, or two RMSNorm scales.
int64_t replicatedLayerParameters(const TransformerShape &s) {
  return s.biases ? 6 * s.hidden : 2 * s.hidden;
}

// One block of one micro-batch on one rank.
LayerCost blockCost(const TransformerShape &s, const Cluster &cluster, int64_t tp, int64_t b,
                    bool sp, Precision precision) {
  const DeviceSpec &d = cluster.device;
  double peak = peakFlops(d, precision);
  int64_t e = elementBytes(precision);
  int64_t tokens = b * s.seq, h = s.hidden, heads = s.heads / tp, dh = s.hidden / s.heads;
  int64_t qkvOut = ceilDiv(h + 2 * (s.kvHeads * dh), tp), ffnLocal = ceilDiv(s.ffn, tp);
  // Megatron's pattern (docs/pipeline.md): QKV and fc1 column parallel, projection and fc2 row
  // parallel, the attention core per local head. Forward C[m,n] = A[m,k]·B[k,n]; backward the
  // input gradient (m,k,n) and the weight gradient (k,n,m), each as many FLOPs.
  std::vector<Gemm> weights = {{tokens, qkvOut, h, 1},
                               {tokens, h, ceilDiv(h, tp), 1},
                               {tokens, ffnLocal * (s.gatedMlp ? 2 : 1), h, 1},
                               {tokens, h, ffnLocal, 1}};
  std::vector<Gemm> core = {{s.seq, s.seq, dh, b * heads}, {s.seq, dh, s.seq, b * heads}};
  LayerCost lc;
  auto gemm = [&](int64_t m, int64_t n, int64_t k, int64_t batch) {
    return gemmSeconds(d, peak, m, n, k, batch, e);
  };
  for (const Gemm &g : weights) {
    lc.forwardSeconds += gemm(g.m, g.n, g.k, g.batch);
    lc.backwardSeconds += gemm(g.m, g.k, g.n, g.batch) + gemm(g.k, g.n, g.m, g.batch);
  }
  for (const Gemm &g : core) {
    double f = gemm(g.m, g.n, g.k, g.batch);
    lc.forwardSeconds += f;
    lc.attentionCoreForwardSeconds += f;
    lc.backwardSeconds += gemm(g.m, g.k, g.n, g.batch) + gemm(g.k, g.n, g.m, g.batch);
  }
  // Memory-bound ops, bytes read + written, unfused: two norms (read, write), two residual adds
  // (2 reads, 1 write) over the local tokens (sequence-split under SP); the activation function
  // over the local ffn columns (gated: two reads, one write); softmax over the local heads'
  // scores (read, write); the four head transposes of q, k, v and the attention output.
  // Assumption: each op's backward moves twice its forward bytes (reads the output gradient
  // and a saved input, writes the input gradient).
  double localTokens = sp ? double(tokens) / double(tp) : double(tokens);
  double softmaxBytes = 2.0 * double(b * heads) * double(s.seq) * double(s.seq) * e;
  double forwardBytes = localTokens * h * e * (2 * 2 + 2 * 3) +
                        double(tokens) * ffnLocal * e * (s.gatedMlp ? 3 : 2) + softmaxBytes +
                        4 * 2.0 * double(tokens) * double(h / tp) * e;
  lc.forwardSeconds += memoryBoundSeconds(d, forwardBytes);
  lc.backwardSeconds += memoryBoundSeconds(d, 2 * forwardBytes);
  lc.attentionCoreForwardSeconds += memoryBoundSeconds(d, softmaxBytes);
  // Tensor parallel: per block two all-reduces of the b·s·h activation forward and two
  // backward; with SP an all-gather plus a reduce-scatter in their place (the same bytes).
  double act = double(tokens) * double(h) * double(e);
  auto coll = [&](Collective kind, double bytes) {
    return collectiveSeconds(cluster, kind, tp, 1, bytes);
  };
  double pair = sp ? coll(Collective::allGather, act) + coll(Collective::reduceScatter, act)
                   : coll(Collective::allReduce, act);
  lc.tpForwardSeconds = lc.tpBackwardSeconds = 2 * pair;
  return lc;
}

// The embedding and the logit layer + loss of one micro-batch on one rank.
EdgeCost edgeCosts(const TransformerShape &s, const Cluster &cluster, int64_t tp, int64_t b,
                   bool sp, Precision precision) {
  const DeviceSpec &d = cluster.device;
  double peak = peakFlops(d, precision);
  int64_t e = elementBytes(precision);
  int64_t tokens = b * s.seq, h = s.hidden;
  auto gemm = [&](int64_t m, int64_t n, int64_t k, int64_t batch) {
    return gemmSeconds(d, peak, m, n, k, batch, e);
  };
  auto coll = [&](Collective kind, double bytes) {
    return collectiveSeconds(cluster, kind, tp, 1, bytes);
  };
  double act = double(tokens) * double(h) * double(e);
  double localTokens = sp ? double(tokens) / double(tp) : double(tokens);
  // Vocab-parallel embedding (a partial sum all-reduced, or reduce-scattered under
  // SP) and logit layer, with a vocab-parallel cross entropy in fp32 (three all-reduces of one
  // fp32 per token: max, sum of exp, target logit).
  EdgeCost ec;
  int64_t vocabLocal = ceilDiv(s.vocab, tp);
  ec.embedForwardSeconds = memoryBoundSeconds(d, 4 * act);
  ec.embedBackwardSeconds = memoryBoundSeconds(d, 2 * 4 * act);
  ec.embedTpForwardSeconds =
      sp ? coll(Collective::reduceScatter, act) : coll(Collective::allReduce, act);
  ec.embedTpBackwardSeconds = sp ? coll(Collective::allGather, act) : 0;
  double logits = double(tokens) * double(vocabLocal);
  ec.headForwardSeconds = gemm(tokens, vocabLocal, h, 1) +
                          memoryBoundSeconds(d, logits * (e + 8) + 4 * localTokens * h * e);
  ec.headBackwardSeconds = gemm(tokens, h, vocabLocal, 1) + gemm(h, vocabLocal, tokens, 1) +
                           memoryBoundSeconds(d, logits * (e + 4) + 8 * localTokens * h * e);
  double ce = 3 * coll(Collective::allReduce, double(tokens) * 4);
  ec.headTpForwardSeconds = (sp ? coll(Collective::allGather, act) : 0) + ce;
  ec.headTpBackwardSeconds =
      sp ? coll(Collective::reduceScatter, act) : coll(Collective::allReduce, act);
  return ec;
}

} // namespace

int64_t peakInFlight(const PipelineShape &shape, int64_t stage) {
  // Megatron's warm-up lengths, as planner/PipelineSchedule.cpp generates them: a stage holds
  // its warm-up forwards plus the one of the first steady 1F1B pair.
  int64_t p = shape.stages, v = shape.virtualStages, total = shape.microBatches * v;
  int64_t warmup = v > 1 ? (p - stage - 1) * 2 + (v - 1) * p : p - stage - 1;
  return std::min(warmup + 1, total);
}

StepEstimator::StepEstimator(const TransformerShape &shape, const Cluster &cluster,
                             int64_t globalBatch)
    : shape_(shape), cluster_(cluster), globalBatch_(globalBatch) {
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
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.vpp < 1 || l.microBatch < 1)
    return fail("tp, pp, dp, vpp and micro-batch must be positive");
  if (l.tp * l.pp * l.dp != cluster_.devices())
    return fail("tp*pp*dp = " + std::to_string(l.tp * l.pp * l.dp) + " but the cluster has " +
                std::to_string(cluster_.devices()) + " devices");
  if (s.heads % l.tp)
    return fail("tp " + std::to_string(l.tp) + " does not divide the " + std::to_string(s.heads) +
                " attention heads");
  if (s.kvHeads % l.tp)
    return fail("tp " + std::to_string(l.tp) + " does not divide the " + std::to_string(s.kvHeads) +
                " key/value heads (grouped-query attention keeps whole kv heads per rank); use a "
                "tp that divides " +
                std::to_string(s.kvHeads));
  if (s.ffn % l.tp)
    return fail("tp " + std::to_string(l.tp) + " does not divide the MLP size " +
                std::to_string(s.ffn));
  if (globalBatch_ % (l.dp * l.microBatch))
    return fail("dp*micro-batch = " + std::to_string(l.dp * l.microBatch) +
                " does not divide the global batch " + std::to_string(globalBatch_));
  if (l.pp * l.vpp > s.layers)
    return fail("pp*vpp = " + std::to_string(l.pp * l.vpp) + " chunks but only " +
                std::to_string(s.layers) + " layers");
  int64_t m = globalBatch_ / (l.dp * l.microBatch);
  if (l.vpp > 1 && (l.pp == 1 || m % l.pp))
    return fail("vpp " + std::to_string(l.vpp) + " needs pp > 1 and the " + std::to_string(m) +
                " micro-batches divisible by pp " + std::to_string(l.pp));
  if (l.sequenceParallel && (l.tp == 1 || s.seq % l.tp))
    return fail("sequence parallelism needs tp > 1 dividing the sequence " + std::to_string(s.seq));
  if (l.zero != 0 && l.zero != 1)
    return fail("zero must be 0 or 1, not " + std::to_string(l.zero));
  return true;
}

const LayerCost &StepEstimator::layerCost(int64_t tp, int64_t b, bool sp, Precision precision) {
  auto key = std::make_tuple(tp, b, sp, int(precision));
  auto it = layers_.find(key);
  if (it != layers_.end())
    return it->second.first;
  return layers_
      .emplace(key, std::make_pair(blockCost(shape_, cluster_, tp, b, sp, precision),
                                   edgeCosts(shape_, cluster_, tp, b, sp, precision)))
      .first->second.first;
}

const EdgeCost &StepEstimator::edgeCost(int64_t tp, int64_t b, bool sp, Precision precision) {
  layerCost(tp, b, sp, precision);
  return layers_.find(std::make_tuple(tp, b, sp, int(precision)))->second.second;
}

const StepEstimator::Pipeline &StepEstimator::pipeline(int64_t pp, int64_t vpp, int64_t m) {
  auto key = std::make_tuple(pp, vpp, m);
  auto it = pipelines_.find(key);
  if (it != pipelines_.end())
    return it->second;
  Pipeline p;
  PipelineShape shape{pp, vpp, m};
  ScheduleKind kind = vpp > 1 ? ScheduleKind::interleaved : ScheduleKind::oneFOneB;
  if (auto steps = buildSchedule(kind, shape, &p.error))
    p.steps = std::move(*steps);
  return pipelines_.emplace(key, std::move(p)).first->second;
}

double StepEstimator::stageParameters(const Layout &l, bool first, bool last) const {
  const TransformerShape &s = shape_;
  double replicated = double(replicatedLayerParameters(s));
  double perLayer = (layerParameters(s) - replicated) / double(l.tp) + replicated;
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
  return layers * perLayer + edges;
}

StepEstimator::ChunkTimes StepEstimator::chunkTimes(const Layout &l) {
  const LayerCost &lc = layerCost(l.tp, l.microBatch, l.sequenceParallel, l.precision);
  const EdgeCost &ec = edgeCost(l.tp, l.microBatch, l.sequenceParallel, l.precision);
  double layers = double(l.vpp * ceilDiv(shape_.layers, l.pp * l.vpp)); // on the stage
  double recomputeCompute = 0, recomputeTp = 0;
  if (l.recompute == Recompute::selective)
    recomputeCompute = lc.attentionCoreForwardSeconds;
  else if (l.recompute == Recompute::full) {
    recomputeCompute = lc.forwardSeconds;
    recomputeTp = lc.tpForwardSeconds; // the recomputed forward repeats its collectives
  }
  // Pipeline sends: the residual stream of one micro-batch (sequence-split under SP), once per
  // chunk step, on the critical path (the simulation's steps wait for their input). A pipeline
  // spanning nodes runs at the pace of its inter-node boundaries.
  double sendBytes = double(l.microBatch * shape_.seq * shape_.hidden) *
                     double(elementBytes(l.precision)) / (l.sequenceParallel ? l.tp : 1);
  double send = l.pp > 1 ? p2pSeconds(cluster_, cluster_.nodes > 1, sendBytes) : 0;
  // Per micro-batch on the first and the last stage (the busier one is the pipeline's pace;
  // with pp = 1 they are the same stage).
  auto stage = [&](bool first, bool last, double &fwd, double &bwd, ChunkTimes &t) {
    double cf = layers * lc.forwardSeconds, cb = layers * (lc.backwardSeconds + recomputeCompute);
    double tf = layers * lc.tpForwardSeconds, tb = layers * (lc.tpBackwardSeconds + recomputeTp);
    if (first) {
      cf += ec.embedForwardSeconds;
      cb += ec.embedBackwardSeconds;
      tf += ec.embedTpForwardSeconds;
      tb += ec.embedTpBackwardSeconds;
    }
    if (last) {
      cf += ec.headForwardSeconds;
      cb += ec.headBackwardSeconds;
      tf += ec.headTpForwardSeconds;
      tb += ec.headTpBackwardSeconds;
    }
    double sends = double(l.vpp) * send;
    fwd = cf + tf + sends;
    bwd = cb + tb + sends;
    t.compute = cf + cb;
    t.tp = tf + tb;
    t.pp = 2 * sends;
  };
  ChunkTimes first, last;
  double f0, b0, f1, b1;
  stage(true, l.pp == 1, f0, b0, first);
  stage(l.pp == 1, true, f1, b1, last);
  ChunkTimes &busy = f1 + b1 >= f0 + b0 ? last : first;
  busy.forward = (f1 + b1 >= f0 + b0 ? f1 : f0) / double(l.vpp);
  busy.backward = (f1 + b1 >= f0 + b0 ? b1 : b0) / double(l.vpp);
  return busy;
}

double StepEstimator::optimizerSeconds(const Layout &l, double localParameters) const {
  // AdamW is memory-bound: per updated parameter it reads the fp32 gradient, master weight and
  // two moments and writes those three and the half copy (30 bytes; 28 in fp32), and the
  // global norm reads the gradients once more. ZeRO-1 updates 1/dp of them.
  double updated = localParameters / double(l.zero ? l.dp : 1);
  double perParameter = (l.precision == Precision::fp32 ? 28 : 30) + 4;
  return memoryBoundSeconds(cluster_.device, updated * perParameter);
}

void StepEstimator::fillMemory(const Layout &l, StepCost &cost) {
  const TransformerShape &s = shape_;
  int64_t m = globalBatch_ / (l.dp * l.microBatch);
  ParameterBytes pb = parameterBytes(l.precision);
  int64_t e = elementBytes(l.precision);
  int64_t layersPerChunk = ceilDiv(s.layers, l.pp * l.vpp);
  double none =
      layerActivationBytes(s, l.microBatch, l.tp, l.sequenceParallel, Recompute::none, l.precision);
  double kept =
      layerActivationBytes(s, l.microBatch, l.tp, l.sequenceParallel, l.recompute, l.precision);
  // A block's input, 2·s·b·h bytes at 2-byte elements (sequence-split under SP).
  double residual = double(l.microBatch * s.seq * s.hidden) * double(e) /
                    (l.sequenceParallel ? double(l.tp) : 1.0);
  double logits = double(l.microBatch * s.seq) * double(ceilDiv(s.vocab, l.tp)) * 4;
  auto stage = [&](int64_t index, StepCost &c) {
    bool first = index == 0, last = index == l.pp - 1;
    double params = stageParameters(l, first, last);
    c.parameterBytes = params * pb.parameter;
    c.gradientBytes = params * pb.gradient;
    c.optimizerBytes = params * pb.optimizer / double(l.zero ? l.dp : 1);
    double inFlight = double(peakInFlight({l.pp, l.vpp, m}, index));
    double transient;
    if (l.recompute == Recompute::full) {
      // megac's full recompute (docs/pipeline.md) stashes each chunk's input only (with
      // pp = vpp = 1: each block's input) and recomputes the whole chunk in its backward, so
      // the chunk's un-recomputed activations exist once, transiently.
      bool single = l.pp * l.vpp == 1;
      c.activationBytes = inFlight * residual * (single ? double(s.layers) : 1.0);
      transient = (single ? 1.0 : double(layersPerChunk)) * none;
    } else {
      c.activationBytes = inFlight * double(layersPerChunk) * kept;
      transient = none; // the block being differentiated: its gradients and recomputed values
    }
    // Workspace: the device's reserve, the transient above, and on the last stage the fp32
    // logits of one micro-batch and their gradient.
    c.workspaceBytes = cluster_.device.reservedBytes + transient + (last ? 2 * logits : 0);
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

double StepEstimator::lowerBoundSeconds(const Layout &l) {
  ChunkTimes ct = chunkTimes(l);
  int64_t m = globalBatch_ / (l.dp * l.microBatch);
  double local = std::max(stageParameters(l, true, l.pp == 1), stageParameters(l, l.pp == 1, true));
  return double(m) * (ct.compute + ct.tp + ct.pp) + optimizerSeconds(l, local);
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
  c.chunkForwardSeconds = ct.forward;
  c.chunkBackwardSeconds = ct.backward;
  double busy = c.computeSeconds + c.tpCommSeconds + c.ppCommSeconds;
  double makespan = busy;
  if (l.pp > 1) {
    const Pipeline &pipe = pipeline(l.pp, l.vpp, m);
    if (!pipe.error.empty()) {
      if (why)
        *why = pipe.error;
      return std::nullopt;
    }
    // Every chunk step costs the busiest stage's average (the schedule runs at its pace).
    ScheduleSimulation sim =
        simulateSchedule({l.pp, l.vpp, m}, pipe.steps, ct.forward, ct.backward);
    if (!sim.error.empty()) {
      if (why)
        *why = sim.error;
      return std::nullopt;
    }
    makespan = std::max(busy, sim.makespan);
  }
  c.bubbleSeconds = makespan - busy;

  // Data parallel: the stage's gradients (fp32 for bf16, REFERENCE.md) reduced over the dp
  // group (ranks tp apart); ZeRO-1 reduce-scatters them and all-gathers the updated parameters.
  // Overlap assumption (Megatron's --overlap-grad-reduce, megac's gradient buckets): the
  // reduction is issued bucket by bucket during the last micro-batch's backward on the stage,
  // so it hides behind that backward except the last bucket (one block's share); the ZeRO
  // all-gather follows the optimizer step and is exposed.
  ParameterBytes pb = parameterBytes(l.precision);
  double local = std::max(stageParameters(l, true, l.pp == 1), stageParameters(l, l.pp == 1, true));
  double reduce =
      collectiveSeconds(cluster_, l.zero ? Collective::reduceScatter : Collective::allReduce, l.dp,
                        l.tp, local * pb.gradient);
  double lastBackward = double(l.vpp) * ct.backward;
  double blocks = double(l.vpp * ceilDiv(shape_.layers, l.pp * l.vpp));
  double exposed = reduce > 0 ? std::max(reduce / blocks, reduce - lastBackward) : 0;
  if (l.zero)
    exposed += collectiveSeconds(cluster_, Collective::allGather, l.dp, l.tp, local * pb.parameter);
  // A tied embedding's gradient is summed between the first and last stage (send/recv).
  if (l.pp > 1 && shape_.tiedEmbedding)
    exposed += p2pSeconds(cluster_, cluster_.nodes > 1,
                          double(ceilDiv(shape_.vocab, l.tp)) * shape_.hidden * pb.gradient);
  c.dpCommSeconds = exposed;
  c.optimizerSeconds = optimizerSeconds(l, local);
  c.stepSeconds = makespan + c.dpCommSeconds + c.optimizerSeconds;

  double devices = double(cluster_.devices());
  double peak = peakFlops(cluster_.device, l.precision);
  c.tokensPerSecond = double(globalBatch_ * shape_.seq) / c.stepSeconds;
  c.hardwareTflopsPerGpu =
      hardwareFlopsPerStep(shape_, globalBatch_, l.recompute) / c.stepSeconds / devices / 1e12;
  c.mfu = modelFlopsPerStep(shape_, globalBatch_) / c.stepSeconds / (devices * peak);

  std::vector<std::pair<double, const char *>> parts = {
      {c.computeSeconds, "compute"},           {c.tpCommSeconds, "tensor-parallel comm"},
      {c.bubbleSeconds, "pipeline bubble"},    {c.ppCommSeconds, "pipeline sends"},
      {c.dpCommSeconds, "data-parallel comm"}, {c.optimizerSeconds, "optimizer"}};
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

std::optional<StepCost> estimate(const TransformerShape &shape, const Cluster &cluster,
                                 int64_t globalBatch, const Layout &layout, std::string *why) {
  StepEstimator estimator(shape, cluster, globalBatch);
  return estimator.estimate(layout, why);
}

} // namespace megac::planner
