// The kernels of one transformer block, and of the embedding and the logit layer, on one rank
// for one micro-batch under a (tp, sequence-parallel) layout, as a software stack launches them
// (issue 15's per-op costing): GEMMs with their shapes, the attention core, every memory-bound
// pass with its bytes, and the tensor-parallel collectives. Derived from the model's dims as the
// stack lowers a block; tests/unit/planner/BlockKernelsTest.cpp checks megac's inventory against
// the partitioned IR's ops. MLIR-free.
#pragma once

#include "planner/KernelModel.h"
#include "planner/Planner.h"
#include "planner/StackProfile.h"

#include <vector>

namespace megac::planner {

enum class Collective { allReduce, allGather, reduceScatter, allToAll };
constexpr int kCollectiveCount = int(Collective::allToAll) + 1;

/// One collective over the tensor-parallel group (or, in PassKernels::ep, the expert-parallel
/// group); `bytes` is the whole (unsharded) buffer, for an all-to-all what each rank holds.
struct CommOp {
  Collective kind = Collective::allReduce;
  double bytes = 0;
};

struct PassKernels {
  std::vector<KernelOp> kernels;
  std::vector<CommOp> tp;
  std::vector<CommOp> ep; // MoE token exchange among the ep ranks (stride tp)
  /// Context parallelism (issue 32), among the cp ranks (stride tp): the all-gather-kv
  /// variant's collectives, or the ring's `cpRingTransfers` point-to-point transfers of
  /// `cpRingBytes` each (one K/V block, or K/V and dK/dV blocks backward), overlapped with the
  /// pass's attention where the stack overlaps its ring, and `cpRingBlockingTransfers` that
  /// never are (megac's dK/dV hops, StackProfile::ringGradientsBlock).
  std::vector<CommOp> cp;
  double cpRingBytes = 0, cpRingTransfers = 0, cpRingBlockingTransfers = 0;
  /// The ring steps the pass's attention is cut into (cp per ring it runs): each overlapped
  /// transfer hides behind one step's share of the attention.
  double cpRingSteps = 0;
};

struct BlockKernels {
  PassKernels forward, backward;
  /// The part of the forward that selective recompute repeats in the backward (the attention
  /// core: Korthikanti et al. 2022, section 5).
  std::vector<KernelOp> attentionCore;
  /// What full recompute repeats in the backward: the forward, or under
  /// StackProfile::recomputeDropsUnreadForward the part of it the backward reads.
  PassKernels fullRecompute;
  /// What full recompute repeats of a pipeline chunk's last block when only the chunk's input
  /// is stashed (StackProfile::fullRecomputeStashesChunkInputs): the forward without its last
  /// unread part (the MLP's row-parallel linear, reduction, bias and residual add: nothing reads
  /// the chunk's output), the attention's output projection included, since the MLP norm's
  /// backward reads its input. The chunk's other blocks repeat their whole forward (the next
  /// block's input); the model's last block too (the final norm reads its output).
  PassKernels chunkLastRecompute;
  /// The pass that adds a micro-batch's weight gradients into the accumulators (stacks with
  /// separateGradAccumulation; run once per micro-batch after the block's backward).
  std::vector<KernelOp> gradAccumulation;
};

struct EdgeKernels {
  PassKernels embedForward, embedBackward, headForward, headBackward;
  /// The logit layer's share of full recompute (StackProfile::recomputeDropsUnreadForward: the
  /// logits GEMM; empty otherwise).
  PassKernels headRecompute;
  /// A pipeline chunk's full recompute on the last stage also repeats the final norm (its
  /// output, which the logits' weight gradient reads, is not stashed).
  PassKernels headChunkRecompute;
  /// Rotary's backward table (-swap_halves(sin)), built once by every stage's backward: in
  /// embedBackward for the first stage; a later stage adds it (empty without rope).
  PassKernels ropeTable;
  /// Under mixed precision with casts (StackProfile::halfCastInstructions), a tied head on a
  /// stage without the embedding casts its own copy of the table each micro-batch (empty
  /// otherwise; on the embedding's stage embedForward's cast serves both).
  PassKernels tiedHeadCast;
};

struct LayerGeometry {
  int64_t tp = 1, microBatch = 1;
  bool sequenceParallel = false;
  Precision precision = Precision::bf16;
  int64_t ep = 1; // expert parallelism (MoE blocks)
  int64_t cp = 1; // context parallelism: each rank holds microBatch·seq/cp tokens
  bool cpRing = false; // cp's K/V exchange is the ring (StackProfile::runsContextParallelRing)
  /// ZeRO-2/3: each micro-batch's weight gradients are reduce-scattered over this many ranks
  /// before they are accumulated into their shard (1: accumulated whole).
  int64_t gradientShards = 1;
  /// ZeRO-3: how many times each parameter is gathered per micro-batch (2 resharded after the
  /// forward); a stack that casts each gathered copy (StackProfile::gathersMasterWeights with
  /// halfCastInstructions) casts it as often.
  int64_t parameterGathers = 1;
};

BlockKernels blockKernels(const TransformerShape &shape, const LayerGeometry &g,
                          const StackProfile &stack);
EdgeKernels edgeKernels(const TransformerShape &shape, const LayerGeometry &g,
                        const StackProfile &stack);

} // namespace megac::planner
