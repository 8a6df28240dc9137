// The planner's cost model: op and collective times, counts, memory, and one step's estimate.
#include "planner/CostModel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace megac::planner {
namespace {

double kvFraction(const TransformerShape &s) {
  return s.kvHeads > 0 && s.heads > 0 ? double(s.kvHeads) / double(s.heads) : 1.0;
}

int64_t ffnOf(const TransformerShape &s) { return s.ffn > 0 ? s.ffn : 4 * s.hidden; }

// One MLP (or one expert): its matrices and biases.
double mlpParameters(const TransformerShape &s) {
  double h = double(s.hidden), f = double(ffnOf(s)), bias = s.biases ? 1 : 0;
  return (s.gatedMlp ? 3 * h * f : 2 * h * f) + bias * ((s.gatedMlp ? 2 : 1) * f + h);
}

// The router of an MoE block: a linear map h -> E.
double routerParameters(const TransformerShape &s) {
  return s.experts > 0 ? double(s.experts) * (double(s.hidden) + (s.biases ? 1 : 0)) : 0.0;
}

} // namespace

double peakFlops(const DeviceSpec &device, Precision precision) {
  switch (precision) {
  case Precision::fp32:
  case Precision::fp64: // a reference precision, not a planned one: costed at the fp32 peak
    return device.peakFlopsFp32;
  case Precision::fp16:
    return device.peakFlopsFp16;
  case Precision::bf16:
    break;
  }
  return device.peakFlopsBf16;
}

int64_t elementBytes(Precision precision) {
  return precision == Precision::fp64 ? 8 : precision == Precision::fp32 ? 4 : 2;
}

double gemmEfficiency(const DeviceSpec &d, double peak, int64_t m, int64_t n, int64_t k,
                      int64_t batch, int64_t elementBytes) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0)
    return 1.0;
  // Roofline: the GEMM must at least read A and B and write C once.
  double flops = 2.0 * double(m) * double(n) * double(k);
  double bytes = double(elementBytes) * (double(m) * k + double(k) * n + double(m) * n);
  double roofline = std::min(1.0, flops / bytes * d.memoryBandwidth * d.memoryEfficiency /
                                      (peak * d.gemmEfficiency));
  // Tile quantization: the padded output is computed; wave quantization: the last wave of
  // tiles leaves computeUnits idle.
  int64_t tm = ceilDiv(m, d.gemmTileM), tn = ceilDiv(n, d.gemmTileN);
  double tileUse = double(m) * double(n) / (double(tm * d.gemmTileM) * double(tn * d.gemmTileN));
  double tiles = double(tm) * double(tn) * double(batch);
  double waves = std::ceil(tiles / double(d.computeUnits));
  double waveUse = tiles / (waves * double(d.computeUnits));
  // K depth: a unit computes its tile over k (2·tm·tn flops per unit of k) and then writes the
  // tile (tm·tn elements) at its share of the memory bandwidth; the write costs as much as
  // k0 = elementBytes·peak / (2·bandwidth) more depth (the machine balance: 347 on H100 bf16,
  // 180 on A100), whatever the tile. So a GEMM of depth k reaches k / (k + k0) of the rate of
  // an infinitely deep one: shallow GEMMs (a tp-split projection, k = h/tp) lose most.
  double k0 = double(elementBytes) * peak / (2.0 * d.memoryBandwidth * d.memoryEfficiency);
  double depthUse = double(k) / (double(k) + k0);
  return d.gemmEfficiency * roofline * tileUse * waveUse * depthUse;
}

double gemmSeconds(const DeviceSpec &d, double peak, int64_t m, int64_t n, int64_t k, int64_t batch,
                   int64_t elementBytes) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0)
    return 0;
  double flops = 2.0 * double(m) * double(n) * double(k) * double(batch);
  return flops / (peak * gemmEfficiency(d, peak, m, n, k, batch, elementBytes));
}

double memoryBoundSeconds(const DeviceSpec &d, double bytes) {
  return bytes / (d.memoryBandwidth * d.memoryEfficiency);
}

double ringSeconds(Collective kind, int64_t ranks, double bytes, double bandwidth, double latency) {
  if (ranks <= 1 || bytes <= 0)
    return 0;
  double n = double(ranks);
  // An all-to-all's pairwise exchange: n-1 rounds, each moving 1/n of the rank's bytes.
  double steps = kind == Collective::allReduce ? 2 * (n - 1) : n - 1;
  return steps / n * bytes / bandwidth + steps * latency;
}

GroupPlacement placeGroup(const Cluster &cluster, int64_t size, int64_t stride) {
  int64_t perNodeSlots = cluster.device.devicesPerNode;
  GroupPlacement g;
  g.perNode =
      stride >= perNodeSlots ? 1 : std::min(size, std::max<int64_t>(1, perNodeSlots / stride));
  g.nodes = ceilDiv(size, g.perNode);
  return g;
}

double calibratedCommSeconds(const Calibration &c, const std::string &op, int64_t ranks,
                             double bytes) {
  // Measured calls of this op over this many ranks, interpolated log-log in bytes; past the
  // largest, at its bandwidth; below the smallest, its latency.
  std::vector<std::pair<double, double>> points;
  for (const CommPoint &p : c.comm)
    if (p.op == op && p.ranks == ranks && p.bytes > 0 && p.seconds > 0)
      points.push_back({p.bytes, p.seconds});
  if (points.empty())
    return -1;
  std::sort(points.begin(), points.end());
  if (bytes <= points.front().first)
    return points.front().second;
  for (size_t i = 1; i < points.size(); ++i)
    if (bytes <= points[i].first) {
      auto [b0, t0] = points[i - 1];
      auto [b1, t1] = points[i];
      double f = std::log(bytes / b0) / std::log(b1 / b0);
      return std::exp(std::log(t0) + f * (std::log(t1) - std::log(t0)));
    }
  return points.back().second * bytes / points.back().first;
}

namespace {
const char *commName(Collective kind) {
  switch (kind) {
  case Collective::allReduce:
    return "all_reduce";
  case Collective::allGather:
    return "all_gather";
  case Collective::reduceScatter:
    return "reduce_scatter";
  case Collective::allToAll:
    return "all_to_all";
  }
  return "all_reduce";
}
} // namespace

double collectiveSeconds(const Cluster &cluster, Collective kind, int64_t size, int64_t stride,
                         double bytes) {
  if (size <= 1 || bytes <= 0)
    return 0;
  const DeviceSpec &d = cluster.device;
  if (placeGroup(cluster, size, stride).nodes == 1) {
    double measured = calibratedCommSeconds(d.calibration, commName(kind), size, bytes);
    if (measured >= 0)
      return measured;
  }
  double intraBw = d.intraNodeBandwidth * d.linkEfficiency;
  double interBw = d.interNodeBandwidth * d.linkEfficiency;
  GroupPlacement g = placeGroup(cluster, size, stride);
  if (g.nodes == 1)
    return ringSeconds(kind, size, bytes, intraBw, d.intraNodeLatency);
  if (g.perNode == 1)
    return ringSeconds(kind, size, bytes, interBw, d.interNodeLatency);
  if (kind == Collective::allToAll) {
    double n = double(size), local = double(g.perNode);
    double inter =
        (n - local) / n * bytes / interBw + double(size - g.perNode) * d.interNodeLatency;
    double intra = (local - 1) / n * bytes / intraBw + double(g.perNode - 1) * d.intraNodeLatency;
    return std::max(inter, intra);
  }
  double inter = ringSeconds(kind, g.nodes, bytes / double(g.perNode), interBw, d.interNodeLatency);
  double intraHalf =
      ringSeconds(Collective::allGather, g.perNode, bytes, intraBw, d.intraNodeLatency);
  // all-reduce: reduce-scatter and all-gather in the node around the inter-node all-reduce;
  // all-gather / reduce-scatter: one intra-node half next to the inter-node one.
  return inter + (kind == Collective::allReduce ? 2 : 1) * intraHalf;
}

double p2pSeconds(const Cluster &cluster, bool crossNode, double bytes) {
  const DeviceSpec &d = cluster.device;
  if (!crossNode) {
    double measured = calibratedCommSeconds(d.calibration, "send_recv", 2, bytes);
    if (measured >= 0)
      return measured;
  }
  if (crossNode)
    return d.interNodeLatency + bytes / (d.interNodeBandwidth * d.linkEfficiency);
  return d.intraNodeLatency + bytes / (d.intraNodeBandwidth * d.linkEfficiency);
}

double layerParameters(const TransformerShape &s) {
  double h = double(s.hidden), g = kvFraction(s);
  double bias = s.biases ? 1 : 0;
  double qkv = h * h * (1 + 2 * g) + bias * h * (1 + 2 * g);
  double proj = h * h + bias * h;
  double mlp = s.experts > 0 ? routerParameters(s) + expertParameters(s) : mlpParameters(s);
  return qkv + proj + mlp + (s.biases ? 4 : 2) * h; // + two norms (scale, and LayerNorm's bias)
}

double expertParameters(const TransformerShape &s) {
  return s.experts > 0 ? double(s.experts) * mlpParameters(s) : 0.0;
}

double activeLayerParameters(const TransformerShape &s) {
  return layerParameters(s) - expertParameters(s) +
         (s.experts > 0 ? double(s.topk) * mlpParameters(s) : 0.0);
}

int64_t kvReplicas(const TransformerShape &s, int64_t tp) {
  int64_t kv = s.kvHeads > 0 ? s.kvHeads : s.heads;
  if (tp < 1 || kv < 1 || s.heads % tp != 0)
    return 0;
  if (kv % tp == 0)
    return 1;
  int64_t replicas = std::lcm(kv, tp) / kv;
  return s.heads % (kv * replicas) == 0 ? replicas : 0;
}

double kvProjectionParameters(const TransformerShape &s) {
  double h = double(s.hidden), g = kvFraction(s);
  return 2 * g * h * (h + (s.biases ? 1 : 0));
}

double nonLayerParameters(const TransformerShape &s) {
  double fromIr = double(s.parameters) - double(s.layers) * layerParameters(s);
  if (s.parameters > 0 && fromIr > 0)
    return fromIr;
  double h = double(s.hidden), v = double(s.vocab);
  return v * h * (s.tiedEmbedding ? 1 : 2) + double(s.seq) * h + 2 * h;
}

double attentionCoreForwardFlops(const TransformerShape &s, double samples) {
  // Q·K^T and attention·V over the full s x s scores: 2 GEMMs of 2·s·s·h each per sample.
  return 4.0 * samples * double(s.seq) * double(s.seq) * double(s.hidden);
}

double layerForwardFlops(const TransformerShape &s, double samples) {
  double t = samples * double(s.seq), h = double(s.hidden), f = double(ffnOf(s));
  double g = kvFraction(s);
  double qkv = 2 * t * h * h * (1 + 2 * g), proj = 2 * t * h * h;
  double mlp = 2 * t * h * f * (s.gatedMlp ? 3 : 2);
  if (s.experts > 0) // the router, and the topk experts of every token
    mlp = 2 * t * h * double(s.experts) + mlp * double(s.topk);
  return qkv + proj + mlp + attentionCoreForwardFlops(s, samples);
}

double logitForwardFlops(const TransformerShape &s, double samples) {
  return 2.0 * samples * double(s.seq) * double(s.hidden) * double(s.vocab);
}

double modelFlopsPerStep(const TransformerShape &s, int64_t globalBatch) {
  double b = double(globalBatch);
  return 3 * (double(s.layers) * layerForwardFlops(s, b) + logitForwardFlops(s, b));
}

double hardwareFlopsPerStep(const TransformerShape &s, int64_t globalBatch, Recompute recompute) {
  double b = double(globalBatch), extra = 0;
  if (recompute == Recompute::selective)
    extra = double(s.layers) * attentionCoreForwardFlops(s, b);
  else if (recompute == Recompute::full)
    extra = double(s.layers) * layerForwardFlops(s, b);
  return modelFlopsPerStep(s, globalBatch) + extra;
}

double layerActivationBytes(const TransformerShape &s, int64_t microBatch, int64_t tp,
                            bool sequenceParallel, Recompute recompute, Precision precision,
                            const StackProfile *stack) {
  // Korthikanti's 34 = attention 11 (QKV input 2, Q and K 4, V 2, projection input 2, dropout
  // mask 1) + MLP 19 (input 2, fc1 output 8, fc2 input 8, mask 1) + norms 4, in units of s·b·h
  // bytes at 2-byte elements. Generalised: K and V scale with kv heads, the MLP's 16 with ffn/h
  // (and 24·ffn/(4h) for a gated MLP's three ffn-sized tensors). The replicated part without
  // SP is 10 (norm inputs 4, QKV and MLP inputs 4, the two masks 2).
  double h = double(s.hidden), sbh = double(s.seq) * double(microBatch) * h;
  double g = kvFraction(s), fOverH = double(ffnOf(s)) / h;
  double linear = (7 + 4 * g) + 4 + 3 + (s.gatedMlp ? 6 : 4) * fOverH;
  double scores = 5.0 * double(s.heads) * double(s.seq) / h;
  double t = double(tp);
  double perSbh;
  if (sequenceParallel)
    perSbh = linear / t;
  else
    perSbh = 10 + (linear - 10) / t;
  // The attention core as the stack runs it (StackProfile.h, "Activation memory"; nullptr is
  // megac's stack). Materialised scores (Megatron 2021) keep Korthikanti's 5·a·s/h unless
  // selective recompute drops them; flash kernels keep only each row's fp32 logsumexp (none
  // under selective: Megatron-Core checkpoints the core attention); megac's kernels keep neither,
  // and its selective recompute rebuilds the attention output (the projection's input, 2).
  bool keepsScores = stack && stack->keepsAttentionScores;
  bool keepsLse = stack && stack->keepsAttentionLse;
  bool dropsOutput = !stack || stack->selectiveDropsAttentionOutput;
  double lseBytes = 0;
  if (recompute == Recompute::selective) {
    if (dropsOutput)
      perSbh -= 2 / t;
  } else {
    if (keepsScores)
      perSbh += scores / t;
    if (keepsLse) // [b, heads/t, s] fp32
      lseBytes = 4.0 * double(microBatch) * double(s.heads) / t * double(s.seq);
  }
  if (s.experts > 0) {
    // An MoE block keeps, instead of the MLP's fc1/fc2 tensors ((gated ? 6 : 4)·ffn/h): the
    // router's fp32 probabilities, mask and gates [T, E] (12·E/h); the
    // dispatched tokens X and the experts' outputs Y (2 + 2 per routed row); the experts'
    // ffn-sized tensors per routed row. Routed rows per token: k packed (Megatron), E in megac's
    // [E, T, h] layout (docs/moe.md "Memory"); under expert parallelism a rank holds E/ep
    // experts of the ep group's ep·T tokens, the same count. Megac's experts run whole on every
    // tensor-parallel rank on its tokens (split only under SP); Megatron splits their ffn over
    // tp but gathers the routed rows (X and Y whole on every rank).
    bool packed = stack && stack->packedRouting,
         splitExperts = stack && stack->expertTensorParallel;
    double rows = packed ? double(s.topk) : double(s.experts);
    double mlpDense = (s.gatedMlp ? 6 : 4) * fOverH; // replaced: the fc1/fc2 tensors
    double router = 12.0 * double(s.experts) / h;
    double ffnPart = rows * (s.gatedMlp ? 6 : 4) * fOverH, tokenPart = rows * 4;
    double moe;
    if (splitExperts)
      moe = (sequenceParallel ? router / t : router) + ffnPart / t + tokenPart;
    else
      moe = (router + ffnPart + tokenPart) / (sequenceParallel ? t : 1.0);
    perSbh += moe - mlpDense / t;
  }
  return sbh * perSbh * double(elementBytes(precision)) / 2.0 + lseBytes;
}

ParameterBytes parameterBytes(Precision precision) {
  switch (precision) {
  case Precision::fp32:
    return {4, 4, 8};
  case Precision::fp64:
    return {8, 8, 16};
  case Precision::fp16:
    return {2, 2, 16};
  case Precision::bf16:
    break;
  }
  return {2, 4, 12};
}

} // namespace megac::planner
