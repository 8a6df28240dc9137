// The planner (issue 6): a first-principles cost model of one training step of a transformer
// under a layout on a cluster, and the search that picks the layout. MLIR-free: the compiler
// side (planner/ModelShape.cpp, `megac plan`) extracts a TransformerShape from the IR and hands
// it here. See planner/Hardware.h for the machines.
#pragma once

#include "parallel/Layout.h"
#include "planner/Hardware.h"
#include "planner/StackProfile.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::planner {

/// What the cost model needs to know about the model, per replica of the global batch. Filled
/// from the IR (counts and FLOPs from the CostOpInterface, dims from the ops' shapes).
struct TransformerShape {
  std::string name;   // "gpt:layers=96,..." or the ONNX file
  int64_t layers = 0; // transformer blocks (encoder + decoder for T5)
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0; // == heads without grouped-query attention
  int64_t ffn = 0;     // MLP inner size
  int64_t vocab = 0;
  int64_t seq = 0;       // tokens per sample (encoder + decoder for T5)
  bool gatedMlp = false; // SwiGLU-style: three MLP matrices
  bool rope = false;     // rotary position embedding on q and k (no learned positions)
  bool biases = true;    // linear biases and LayerNorm (GPT, BERT); false: bias-free, RMSNorm
  bool tiedEmbedding = true;
  /// Mixture of experts (docs/moe.md): every block's MLP is `experts` expert MLPs (each of the
  /// shape above: ffn, gatedMlp) behind a router, of which each token uses `topk`. 0: dense.
  int64_t experts = 0;
  int64_t topk = 0;
  int64_t parameters = 0; // exact count from the IR
  /// Forward FLOPs of one sample (seq tokens), all ops, from the CostOpInterface; and the GEMM
  /// part. Per-block and embedding/head splits are derived from the dims above.
  double forwardFlopsPerSample = 0;
  double forwardGemmFlopsPerSample = 0;
  /// Dropout probability of the hidden states and attention probabilities (0: none). Megatron's
  /// GPT runs train with 0.1; megac's zoo models have none; `megac plan --dropout P` sets it.
  double dropout = 0;
  /// Dropless MoE routing as a training run measured it (`megac plan --moe-load TRAIN.jsonl`,
  /// `megac train`'s moe_load summed over its records): per block, per expert, the routed rows.
  /// Empty: balanced routing (each expert T·k/E rows, what the auxiliary loss aims at).
  std::vector<std::vector<double>> moeLoad;
};

/// The busiest expert-parallel rank's routed rows over the balanced share (>= 1): with the
/// experts split over ep in contiguous blocks of E/ep (docs/moe.md), per block the largest block
/// sum over the mean, weighted as the blocks run one after another (the sum over blocks of the
/// busiest rank's rows over the sum of the means); 1 without a measured load or at ep 1.
double busiestExpertRankShare(const TransformerShape &shape, int64_t ep);

/// Which choices the user pinned (`megac plan --tp 8 ...`); unset ones are searched.
struct Pins {
  std::optional<int64_t> tp, pp, dp, ep, vpp, microBatch;
  std::optional<int64_t> cp; // context parallelism (issue 32)
  /// cp's K/V exchange: the ring (true, `--cp-comm-type p2p`) or all-gather-kv (false); unset,
  /// the search tries each variant the stack runs (Layout::cpRing).
  std::optional<bool> cpRing;
  std::optional<bool> sequenceParallel;
  std::optional<int> zero;
  std::optional<Recompute> recompute;
  /// ZeRO-3's reshard after forward (Layout::reshardAfterForward, `--reshard-after-forward`);
  /// unset, the search tries both where a step has the choice (zero 3 at pp = vpp = 1).
  std::optional<bool> reshardAfterForward;
  /// The pipeline schedule (`megac plan --schedule`): oneFOneB (at vpp 1, or interleaved at
  /// vpp > 1), interleaved (vpp > 1 only), zbH1, zbH2 (vpp 1), zbv (vpp 2). Unset: every kind the
  /// stack runs and the schedule library accepts for the layout's (pp, vpp, micro-batches).
  std::optional<schedule::ScheduleKind> schedule;
  Precision precision = Precision::bf16;
};

/// `count` GEMMs of one shape, as the inventory lists them (C[m,n] = A[m,k]·B[k,n], `batch`
/// independent products in one launch).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  double count = 1;
  bool routed = false; // an MoE expert matrix (KernelOp::routed): m is the balanced rows
};

/// The predicted cost of one optimizer step.
/// One pipeline stage's chunk kernels in a step (the optimizer step apart): its GEMMs by shape
/// and its launches and bytes by class, as StepCost's gemmShapes, kernelLaunches, kernelBytes.
struct StageInventory {
  std::vector<GemmShape> gemms;
  std::vector<std::pair<std::string, double>> launches, bytes;
};

struct StepCost {
  double computeSeconds = 0; // forward + backward (+ recompute) of the busiest stage
  double tpCommSeconds = 0;  // tensor/sequence-parallel collectives (not overlapped)
  double ppCommSeconds = 0;  // activations between stages
  double dpCommSeconds = 0;  // gradient reduction (ZeRO: reduce-scatter + all-gather), exposed part
  double epCommSeconds = 0;  // expert-parallel token exchange (not overlapped)
  /// Context parallelism's K/V exchange inside the layers, exposed part (issue 32): the
  /// all-gather of K/V and reduce-scatter of dK/dV, or the ring's p2p transfers.
  double cpCommSeconds = 0;
  /// ZeRO-2/3 inside the layers, exposed part (issue 31): ZeRO-3's parameter all-gathers
  /// (before each forward and again before each backward) and the per-micro-batch gradient
  /// reduce-scatters of ZeRO-2/3.
  double zeroGatherSeconds = 0, zeroReduceScatterSeconds = 0;
  double bubbleSeconds = 0; // pipeline idle time, from simulating the schedule
  double optimizerSeconds = 0;
  double stepSeconds = 0; // the total
  /// computeSeconds (recompute and the gradient accumulation included) + optimizerSeconds by
  /// kernel class; launch/instruction overhead on its own.
  double gemmSeconds = 0, attentionSeconds = 0, memoryBoundSeconds = 0, overheadSeconds = 0;
  /// tpCommSeconds by collective; dpCommSeconds split into the exposed gradient reduction
  /// (all-reduce or ZeRO's reduce-scatter) and the exposed ZeRO parameter all-gather (plus the
  /// tied-embedding exchange).
  double tpAllReduceSeconds = 0, tpAllGatherSeconds = 0, tpReduceScatterSeconds = 0;
  double dpReduceSeconds = 0, dpGatherSeconds = 0;
  /// Kernels one step launches on the busiest stage's rank, by class name
  /// (planner/KernelModel.h), the optimizer's included.
  std::vector<std::pair<std::string, double>> kernelLaunches;
  /// Their predicted seconds by class (without the per-kernel overhead), the same classes:
  /// what bench/cpu_cost_model.py --by-class sets against the trace's instruction times.
  std::vector<std::pair<std::string, double>> kernelSeconds;
  /// And the bytes they move by class (KernelOp::bytes: a memory-bound kernel's operands read
  /// and written; a GEMM's packing only), what tests/e2e/plan_kernels_test.py compares with the
  /// traced instructions' operand bytes.
  std::vector<std::pair<std::string, double>> kernelBytes;
  /// The GEMMs among them by shape (mergeGemmShapes: m <= n, sorted), what
  /// tests/e2e/plan_kernels_test.py compares with the executed instructions' shapes.
  std::vector<GemmShape> gemmShapes;
  /// With pp > 1: the first and the last stage's inventories (gemmShapes and kernelLaunches are
  /// the busier one's), with pp > 2 a middle stage's (its blocks only).
  StageInventory firstStage, lastStage, middleStage;
  /// One chunk step of the busiest stage, forward and backward (recompute, tensor-parallel
  /// collectives and the pipeline send included): what the schedule was simulated with.
  double chunkForwardSeconds = 0, chunkBackwardSeconds = 0;
  /// The weight-gradient part of chunkBackwardSeconds (the kernel model's dW/db kernels and the
  /// gradient accumulation): a zero-bubble schedule's W, its B the rest.
  double chunkWeightSeconds = 0;
  double tokensPerSecond = 0;
  double hardwareTflopsPerGpu = 0; // recomputed work counted (SC21 Eq. 3 convention)
  double mfu = 0;                  // model FLOPs without recompute (Korthikanti Eq. 7) / peak
  // Memory per GPU, bytes.
  double parameterBytes = 0, gradientBytes = 0, optimizerBytes = 0, activationBytes = 0,
         workspaceBytes = 0, totalBytes = 0;
  bool fits = false;
  /// CPU calibrations (KernelOp::coldBytes): the busiest stage's training state (parameters x
  /// 16 bytes), and whether weights and weight gradients were charged as streaming from main
  /// memory (the state times the ranks per node outgrows the node's last-level cache, and the
  /// calibration measured a main-memory rate).
  double trainingStateBytes = 0;
  bool weightsInMemory = false;
  /// The dominant costs, largest first ("compute 61%", "pipeline bubble 18%", ...).
  std::vector<std::string> dominant;
};

/// One candidate: a Layout (parallel/Layout.h) and its predicted cost.
struct PlanCandidate {
  Layout layout;
  StepCost cost;
};

/// The cost of `layout` for `shape` with `globalBatch` samples per step on `cluster`; nullopt
/// with `why` when the layout is invalid (degrees that do not divide, ranks != cluster size).
std::optional<StepCost> estimate(const TransformerShape &shape, const Cluster &cluster,
                                 int64_t globalBatch, const Layout &layout, std::string *why,
                                 const StackProfile &stack);
/// The default stack for `cluster`: megac (its CPU runtime on "cpu" devices, else CUDA).
StackProfile defaultStack(const Cluster &cluster);
inline std::optional<StepCost> estimate(const TransformerShape &shape, const Cluster &cluster,
                                        int64_t globalBatch, const Layout &layout,
                                        std::string *why) {
  return estimate(shape, cluster, globalBatch, layout, why, defaultStack(cluster));
}

struct SearchResult {
  std::vector<PlanCandidate> best;             // fitting layouts, fastest first (at most topK)
  std::optional<PlanCandidate> smallestMemory; // when nothing fits: the closest, to explain
  int64_t evaluated = 0;
  double seconds = 0;
  /// When no layout satisfies the pins at all (both above empty): why, in one line.
  std::string why;
  /// The fastest fitting layout with ZeRO-3, with cp > 1 and with cp = 1 (evaluated even when
  /// outside the top K), so the report can say why #1 beats them.
  std::optional<PlanCandidate> bestZero3, bestWithCp, bestWithoutCp;
  /// The fastest fitting layout with a zero-bubble schedule (zb-h1, zb-h2, zbv), so the report
  /// can say why #1 does not run one (issue 35).
  std::optional<PlanCandidate> bestZeroBubble;
  /// The fastest fitting layout with cp > 1 whose K/V exchange is the other variant than
  /// bestWithCp's (all-gather-kv vs the ring), on a stack that runs both.
  std::optional<PlanCandidate> bestOtherCpVariant;
};

/// Every layout that satisfies the pins, pruned, ranked by predicted step time.
SearchResult search(const TransformerShape &shape, const Cluster &cluster, int64_t globalBatch,
                    const Pins &pins, int topK, const StackProfile &stack);
inline SearchResult search(const TransformerShape &shape, const Cluster &cluster,
                           int64_t globalBatch, const Pins &pins, int topK) {
  return search(shape, cluster, globalBatch, pins, topK, defaultStack(cluster));
}

} // namespace megac::planner
