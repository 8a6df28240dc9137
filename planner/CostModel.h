// The pieces of the planner's cost model (planner/Planner.h's estimate is built from them):
// GEMM and memory-bound op times, alpha-beta collectives on the cluster's links, FLOP and
// parameter counts, Korthikanti activation memory. MLIR-free.
#pragma once

#include "parallel/PipelineSchedule.h"
#include "planner/BlockKernels.h"
#include "planner/Hardware.h"
#include "planner/Planner.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace megac::planner {

/// a / b rounded up (a >= 0, b > 0): layers per stage, vocabulary rows per tp rank.
inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The schedule library's names (parallel/PipelineSchedule.h), as the planner simulates them.
using schedule::PipelineShape;
using schedule::ScheduleKind;
using schedule::ScheduleSimulation;
using schedule::ScheduleStep;

/// Dense peak FLOP/s of `device` at `precision`.
double peakFlops(const DeviceSpec &device, Precision precision);
/// Bytes of one activation element (2 for bf16/fp16, 4 for fp32).
int64_t elementBytes(Precision precision);

/// Fraction of `peak` a GEMM C[m,n] = A[m,k]·B[k,n] (`batch` independent ones) reaches:
/// the roofline min(1, intensity·bandwidth/peak) on the bytes it must move, times the large-GEMM
/// efficiency, times tile and wave quantization (NVIDIA's GEMM performance guide): the output
/// is cut into gemmTileM x gemmTileN tiles that run computeUnits at a time, so partial tiles
/// and a partial last wave compute nothing useful; and times the depth use k / (k + k0): each
/// tile's result is written at the unit's share of the memory bandwidth after its k-loop, as
/// long as k0 = elementBytes·peak / (2·bandwidth·memoryEfficiency) more of depth.
double gemmEfficiency(const DeviceSpec &device, double peak, int64_t m, int64_t n, int64_t k,
                      int64_t batch, int64_t elementBytes);
/// Seconds of that GEMM: 2·m·n·k·batch / (peak · gemmEfficiency).
double gemmSeconds(const DeviceSpec &device, double peak, int64_t m, int64_t n, int64_t k,
                   int64_t batch, int64_t elementBytes);
/// Seconds of a memory-bound op moving `bytes` (read + written).
double memoryBoundSeconds(const DeviceSpec &device, double bytes);

/// One ring over `ranks` on a link: all-reduce 2(n-1)/n·bytes/bw + 2(n-1)·alpha; all-gather and
/// reduce-scatter (n-1)/n·bytes/bw + (n-1)·alpha. `bytes` is the full (unsharded) buffer. An
/// all-to-all (pairwise exchange: each rank sends (n-1)/n of the `bytes` it holds) costs what an
/// all-gather does.
double ringSeconds(Collective kind, int64_t ranks, double bytes, double bandwidth, double latency);

/// Where a process group lies: `size` ranks whose ids step by `stride` (Megatron's order:
/// tp stride 1, dp stride tp, pp stride tp·dp).
struct GroupPlacement {
  int64_t perNode = 1; // group members sharing one node
  int64_t nodes = 1;   // nodes the group spans
};
GroupPlacement placeGroup(const Cluster &cluster, int64_t size, int64_t stride);
/// A collective over such a group: a ring on NVLink within a node, on InfiniBand when every
/// member is on its own node, else hierarchical (reduce-scatter in the node, all-reduce of
/// bytes/perNode across nodes with every GPU on its own NIC, all-gather in the node; an
/// all-gather or reduce-scatter does the matching half). Link bandwidth times linkEfficiency.
/// An all-to-all across nodes sends the share for other nodes, (n - perNode)/n of its bytes,
/// on the rank's own NIC while the in-node share goes over NVLink: the slower of the two.
double collectiveSeconds(const Cluster &cluster, Collective kind, int64_t size, int64_t stride,
                         double bytes);
/// A calibrated collective (`megac calibrate`'s "comm" table: op "all_reduce", "all_gather",
/// "reduce_scatter" or "send_recv" over `ranks`), or -1 when the table has no such points.
double calibratedCommSeconds(const Calibration &calibration, const std::string &op, int64_t ranks,
                             double bytes);
/// One point-to-point message.
double p2pSeconds(const Cluster &cluster, bool crossNode, double bytes);

/// Parameters of one transformer block (weights, biases, two norms) from the dims; an MoE
/// block's router and all its experts included.
double layerParameters(const TransformerShape &shape);
/// The experts of one MoE block (E·3·h·ffn for SwiGLU experts; 0 for a dense model), and the
/// parameters one token uses in a block: all but the experts, plus topk of them.
double expertParameters(const TransformerShape &shape);
double activeLayerParameters(const TransformerShape &shape);
/// How many copies of each key/value head tp makes: 1 when tp divides the kv heads; with fewer
/// (or indivisible) kv heads, the smallest r with tp | kv·r | heads — megac's partitioner then
/// keeps the k/v projections whole and repeats each head r times (passes/partition); 0 when no
/// such r exists (or tp does not divide the query heads).
int64_t kvReplicas(const TransformerShape &shape, int64_t tp);
/// The k/v projection parameters (weights and biases) of one block.
double kvProjectionParameters(const TransformerShape &shape);
/// Parameters outside the blocks: shape.parameters minus the blocks when the IR gave a count,
/// else the embedding, learned positions, final norm (and an untied head).
double nonLayerParameters(const TransformerShape &shape);
/// Forward FLOPs of one block for `tokens` tokens in samples of shape.seq: the GEMMs
/// (24·b·s·h² + 4·b·s²·h for a GPT with ffn = 4h, REFERENCE.md), and the attention-core part.
/// An MoE block counts the router and the topk experts each token uses (active FLOPs: what
/// 6·active parameters·tokens + attention counts, the MFU convention for MoE).
double layerForwardFlops(const TransformerShape &shape, double samples);
double attentionCoreForwardFlops(const TransformerShape &shape, double samples);
/// Logit layer forward FLOPs: 2·b·s·h·V.
double logitForwardFlops(const TransformerShape &shape, double samples);
/// Model FLOPs of one step of `globalBatch` samples, without recompute (Korthikanti Eq. 7
/// for a GPT): 3 x forward. Hardware FLOPs add what `recompute` recomputes (SC21 Eq. 3 for full).
double modelFlopsPerStep(const TransformerShape &shape, int64_t globalBatch);
double hardwareFlopsPerStep(const TransformerShape &shape, int64_t globalBatch,
                            Recompute recompute);

/// Activation bytes one block keeps from its forward to its backward for one micro-batch of
/// `microBatch` samples on one rank (Korthikanti et al. 2022, Table 2, generalised to the
/// shape's ffn, gated MLP and kv heads; 2-byte elements, scaled for fp32):
/// none: s·b·h·(10 + 24/t + 5·a·s/(h·t)), with SP s·b·h/t·(34 + 5·a·s/h), selective drops the
/// 5·a·s/h term -- on a stack that keeps the scores (keepsAttentionScores, Megatron 2021).
/// Flash stacks keep no 5·a·s/h term, only a per-row fp32 logsumexp (keepsAttentionLse, not
/// under selective); megac's selective also drops the attention output (2·s·b·h/t,
/// selectiveDropsAttentionOutput). `full` is not per block (see estimate): this returns the
/// none-value for it. An MoE block's MLP part is its routed buffers instead (see the
/// definition): `stack` says whether they are packed (T·k rows) and split over tp; nullptr is
/// megac's stack.
double layerActivationBytes(const TransformerShape &shape, int64_t microBatch, int64_t tp,
                            bool sequenceParallel, Recompute recompute, Precision precision,
                            const StackProfile *stack = nullptr);

/// Bytes per parameter (params, gradients, optimizer state) at `precision` (REFERENCE.md,
/// Megatron's distributed-optimizer table): bf16 2 + 4 + 12, fp16 2 + 2 + 16, fp32 4 + 4 + 8;
/// ZeRO-1 divides the optimizer state by dp.
struct ParameterBytes {
  double parameter = 0, gradient = 0, optimizer = 0;
};
ParameterBytes parameterBytes(Precision precision);

/// Micro-batch chunks whose forward ran and backward (or W) did not, at most, on `stage`: under
/// the 1F1B (virtualStages 1) or interleaved schedule simulateSchedule's stagePeakInFlight in
/// closed form, so memory needs no simulation (tests compare the two); under the zero-bubble
/// kinds (ZB-H2: 2p - 1 on stage 0) simulated, and the 1F1B form if the kind cannot run the
/// shape (estimate() refuses it).
int64_t peakInFlight(const PipelineShape &shape, int64_t stage,
                     ScheduleKind kind = ScheduleKind::oneFOneB);

/// Time of one pass (a block's forward or backward, an edge's) on one rank for one micro-batch:
/// its kernels, and its tensor-parallel collectives by kind.
struct PassCost {
  KernelTime compute;
  double tp[kCollectiveCount] = {}; // indexed by Collective
  double ep = 0;                    // expert-parallel token exchange
  double cp = 0;                    // context parallelism's K/V exchange, exposed part
  double tpSeconds() const {
    double sum = 0;
    for (double t : tp)
      sum += t;
    return sum;
  }
  PassCost &operator+=(const PassCost &o) {
    compute += o.compute;
    for (int i = 0; i < kCollectiveCount; ++i)
      tp[i] += o.tp[i];
    ep += o.ep;
    cp += o.cp;
    return *this;
  }
  PassCost scaled(double f) const {
    PassCost c;
    c.compute = compute.scaled(f);
    for (int i = 0; i < kCollectiveCount; ++i)
      c.tp[i] = tp[i] * f;
    c.ep = ep * f;
    c.cp = cp * f;
    return c;
  }
};

/// Costs of one transformer block for one micro-batch on one rank (planner/Planner.cpp).
struct LayerCost {
  PassCost forward, backward;
  KernelTime attentionCore;    // what selective recompute repeats
  PassCost fullRecompute;      // what full recompute repeats (BlockKernels::fullRecompute)
  PassCost chunkLastRecompute; // a chunk's last block's (BlockKernels::chunkLastRecompute)
  KernelTime gradAccumulation; // per micro-batch, after the backward
  /// The backward's weight-gradient kernels (KernelOp::weightGradient): with gradAccumulation,
  /// a zero-bubble schedule's W; the rest of the backward is its B.
  KernelTime weightGradient;
};
/// Costs of the embedding (first chunk) and the logit layer + loss (last chunk), the same way.
struct EdgeCost {
  PassCost embedForward, embedBackward, headForward, headBackward;
  PassCost headRecompute;      // the logit layer's share of full recompute
  PassCost headChunkRecompute; // and the final norm, under a pipeline chunk's full recompute
  PassCost ropeTable;          // rotary's backward table, on each later stage too
  PassCost tiedHeadCast;       // a tied head's table cast, on a stage without the embedding
  KernelTime embedWeight, headWeight; // their weight-gradient kernels (KernelOp::weightGradient)
};

/// estimate() for many layouts of one model on one cluster: block and edge costs per
/// (tp, micro-batch, SP), and pipeline schedules per (pp, vpp, micro-batches), computed once.
class StepEstimator {
public:
  StepEstimator(const TransformerShape &shape, const Cluster &cluster, int64_t globalBatch,
                const StackProfile &stack);
  /// Memory per GPU only (the StepCost's memory fields and `fits`; times are zero). Cheap: the
  /// search prunes with it before computing times.
  std::optional<StepCost> memory(const Layout &layout, std::string *why);
  /// Everything (Planner.h's estimate).
  std::optional<StepCost> estimate(const Layout &layout, std::string *why);
  /// Whether estimate() lists the step's GEMMs by shape (StepCost::gemmShapes and the stages'),
  /// and with pp > 2 a middle stage's inventory: off for the search's estimates (carrying the
  /// lists through every layout's sums costs about a sixth of the search), on to report the
  /// layouts it keeps.
  void listGemms(bool on) { listGemms_ = on; }
  /// A lower bound of stepSeconds (busy time of the busiest stage, no bubble, no exposed DP
  /// communication); the layout must be valid.
  double lowerBoundSeconds(const Layout &layout);

  /// `cpRing`: the layout asks for cp's ring (Layout::cpRing); the stack decides what runs.
  /// `gradientShards`, `parameterGathers`: LayerGeometry's (ZeRO-2/3, ZeRO-3).
  /// `weightsInMemory`: KernelModel::setWeightsInMemory's (chunkTimes decides it per layout).
  const LayerCost &layerCost(int64_t tp, int64_t microBatch, bool sequenceParallel,
                             Precision precision, int64_t ep = 1, int64_t cp = 1,
                             bool cpRing = false, int64_t gradientShards = 1,
                             int64_t parameterGathers = 1, bool weightsInMemory = false);
  const EdgeCost &edgeCost(int64_t tp, int64_t microBatch, bool sequenceParallel,
                           Precision precision, int64_t ep = 1, int64_t cp = 1,
                           bool cpRing = false, int64_t gradientShards = 1,
                           int64_t parameterGathers = 1, bool weightsInMemory = false);
  /// Bytes of ZeRO-3's gathered parameters in flight on one rank: the largest gathered unit
  /// (a block, or the embedding table / logit layer of an edge stage), once, or twice when the
  /// stack prefetches the next one (StackProfile::prefetchShardedParams); without reshard after
  /// forward (Layout::reshardAfterForward) every gathered parameter of the stage, kept from its
  /// forward use to its backward one. 0 below zero 3.
  double gatheredParameterBytes(const Layout &layout) const;
  /// Bytes of whole gradients in flight under ZeRO-2/3 before their reduce-scatter: one
  /// block's (a bucket). 0 below zero 2.
  double gradientBucketBytes(const Layout &layout) const;

private:
  struct Pipeline {
    std::vector<std::vector<ScheduleStep>> steps;
    std::string error;
    /// Per stage, the most (chunk, micro-batch) pairs whose forward ran and whose whole backward
    /// or W did not: counted along the stage's order (what simulateSchedule's stagePeakInFlight
    /// says, with no times needed), once per shape.
    std::vector<int64_t> stagePeakInFlight;
  };
  const Pipeline &pipeline(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t microBatches);
  bool validate(const Layout &layout, std::string *why) const;
  struct ChunkTimes {
    double forward = 0, backward = 0; // per chunk step of the busiest stage, averaged
    double weight = 0; // the weight-gradient part W of `backward` (a zero-bubble schedule's W)
    double compute = 0, tp = 0, pp = 0, ep = 0;   // per micro-batch over the stage's chunks
    double cp = 0;                                // context parallelism's exchange, exposed
    double zeroGather = 0, zeroReduceScatter = 0; // ZeRO-3 gathers, ZeRO-2/3 reduce-scatters
    /// One pipeline transfer placed between its sending and receiving step by the simulation
    /// (megac: a rendezvous with the receive, posted receiveLookahead steps ahead: see
    /// PipelineCosts); 0 when the sends are in pp instead.
    double transfer = 0;
    int64_t receiveLookahead = -1;
    PassCost split; // compute and tp of one micro-batch, by class and kind
    /// The first and the last stage's kernels of one micro-batch (the same stage at pp 1), and
    /// with pp > 2 a middle stage's (its blocks only): `split` is the busier one's; these give
    /// every stage's inventory (StepCost::stageGemms).
    KernelTime firstStage, lastStage, middleStage;
  };
  ChunkTimes chunkTimes(const Layout &layout);
  void fillMemory(const Layout &layout, StepCost &cost);
  double stageParameters(const Layout &layout, bool first, bool last) const;
  /// The busiest stage's parameters, gradients and AdamW moments in f32: 16 bytes a parameter
  /// (KernelModel::setWeightsInMemory's threshold against the cache).
  double trainingStateBytes(const Layout &layout) const;
  /// The experts among stageParameters (each rank holds E/ep of them, split over tp too when
  /// the stack splits experts); their gradients are reduced over dp/ep ranks.
  double stageExpertParameters(const Layout &layout) const;
  /// The ranks ZeRO shards the dense parameters' optimizer state (ZeRO-2: and gradients;
  /// ZeRO-3: and parameters) over: the gradient-reduction group dp x cp (Megatron's
  /// data-parallel group with context parallelism), divided by ep on a stack that shards
  /// everything over the mesh's dp axis (StackProfile).
  int64_t denseZeroShards(const Layout &layout) const {
    return (stack_.zeroOverExpertDataParallel ? layout.dp / layout.ep : layout.dp) * layout.cp;
  }
  /// The same for the experts: the dp/ep ranks holding the same experts, times cp.
  int64_t expertZeroShards(const Layout &layout) const { return layout.dp / layout.ep * layout.cp; }
  /// The largest parameter unit ZeRO-3 gathers at once on the busiest stage (see
  /// gatheredParameterBytes), in parameters.
  double largestGatheredUnit(const Layout &layout, bool first, bool last) const;
  /// The optimizer step: the global norm, the gradients' unpacking and (`withUpdate`) AdamW.
  KernelTime optimizerTime(const Layout &layout, double localParameters, double localExperts,
                           bool withUpdate = true) const;
  /// One ZeRO collective over the stage's `params` (of which `experts`) at `bytesPerParameter`.
  double zeroCollective(const Layout &layout, Collective kind, double params, double experts,
                        double bytesPerParameter) const;
  double pipelineSendSeconds(const Layout &layout, double bytes) const;

  TransformerShape shape_;
  Cluster cluster_;
  StackProfile stack_;
  int64_t globalBatch_;
  bool listGemms_ = false;
  std::map<std::tuple<int64_t, int64_t, bool, int, int64_t, int64_t, bool, int64_t, int64_t, bool,
                        bool>,
           std::pair<LayerCost, EdgeCost>>
      layers_;
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, Pipeline> pipelines_;
};

} // namespace megac::planner
