// The built-in software-stack profiles (planner/StackProfile.h). Sources in docs/planner.md.
#include "planner/StackProfile.h"

namespace megac::planner {
namespace {

// megac as built (docs/cuda.md, docs/cpu-performance.md). The CPU runtime runs the plan's
// instructions one by one: GEMMs read transposes as flags, weight gradients (dense and MoE
// experts') accumulate inside their GEMM, the other gradients are added into their accumulators
// once per micro-batch, the global norm is one instruction, AdamW one multi-tensor instruction per
// dtype group with the clip folded in (issue 30: no clip pass, clipPass off; e2e_gemm_layout
// asserts no ClipByNorm is left and every AdamWMulti clips), collectives block. Attention takes q,
// k, v as [b, s, heads, d]: head splits are reshapes, not copies. The CUDA runtime fuses
// elementwise chains with NVRTC and runs a flash-style attention kernel; it does not overlap
// communication, and pipeline transfers go through host memory.
StackProfile megac(bool cpu) {
  StackProfile p;
  p.name = "megac";
  p.description = cpu ? "megac's CPU runtime: instructions in order, collectives overlapped "
                        "only with --overlap on"
                      : "megac's CUDA runtime: NVRTC elementwise fusion, flash-style attention, "
                        "overlap only with --overlap on, pipeline sends through host memory";
  // passes/training/GemmFusion.cpp: no transpose feeds a GEMM, and weight gradients (MoE
  // experts' too) accumulate in their GEMM; under bf16/fp16 the dense ones read their half
  // operands into the fp32 accumulator (the experts' keep a widened add); e2e_gemm_layout pins
  // all of it on the partition suite's plans (bf16/fp16 included), e2e_plan_kernels this
  // inventory against the executed instructions.
  p.transposeInstructions = false;
  p.separateGradAccumulation = true;
  p.gemmAccumulatesWeightGrads = true;
  p.gemmAccumulatesHalfWeightGrads = true;
  p.replicatesKvHeads = true;
  // Both runtimes run the same compiled graph (docs/planner.md, "A stack is data").
  p.separateProjections = true;
  p.ropePerTensor = true;
  p.rowParallelBiasKernel = true;
  p.positionBroadcastKernel = true;
  p.embeddingGradKernels = true;
  p.fusedCrossEntropy = true;
  p.lossKernels = true;
  p.accumulatesEdgeGradients = true;
  p.groupedGlobalNorm = true;
  p.concatenatesGradients = true;
  p.recomputeDropsUnreadForward = true;
  // passes/training/MultiTensorOptimizer.cpp: one AdamWMulti per program (e2e_gemm_layout
  // counts it on the partition suite's plans; e2e_plan_kernels checks the inventory).
  p.multiTensorOptimizer = true;
  // Attention (runtime/cpu/Nn.cpp and Grad.cpp; runtime/cuda/kernels/Attention.cu): one
  // Attention and one AttentionGrad instruction per block; the backward recomputes the
  // probabilities from q and k (on CUDA also the row statistics), so nothing of size s x s and
  // no statistics live from the forward to the backward. Selective recompute re-runs the
  // attention for its output (passes/schedule/ForwardBackwardSplit.cpp).
  p.attentionKernel = true;
  p.selectiveDropsAttentionOutput = true;
  // Expert parallelism (issue 21, docs/moe.md): the routing all-gathered over ep, then
  // moe_exchange (an all-to-all-v of the routed rows) each way; ZeRO-1 over the dp/ep axis. The
  // CPU runtime runs it over MPI; the CUDA runtime runs MoeAllToAll as a counted all-to-all-v
  // over grouped ncclSend/ncclRecv since issue 29 (docs/cuda.md), not yet on a GPU: its profile
  // plans ep = 1 (supportsExpertParallel off) until a GPU check shows it.
  p.allToAllDispatch = true;
  p.dispatchScalesTokens = true;
  p.gathersRouting = true;
  p.groupedExpertGemms = true; // moe_matmul: one instruction per expert matrix (docs/moe.md)
  p.routerOpByOp = true;
  p.zeroOverExpertDataParallel = true;
  // Issue 35: mega-backward-weight-split and the schedule library's zb-h1, zb-h2 and zbv run on
  // the pipeline runner of both runtimes (e2e_partition_zerobubble on the CPU).
  p.zeroBubbleSchedules = true;
  // Issues 31/32: context parallelism's K/V all-gather runs start/done around its use:
  // blocking (ZeRO-3's gathers and ZeRO-2/3's reduce-scatters overlap: below). cp composes with
  // tp, dp, pp, ZeRO 1-3 and dropless ep as the CPU compiler runs it (docs/context-parallel.md;
  // e2e_context_parallel); the CUDA runtime still refuses cp. Both exchanges run
  // (--cp-comm-type all_gather|p2p); the ring computes each block on a helper thread while the
  // next one is received (overlapped), re-runs the forward ring in the backward for the row
  // statistics and passes dK/dV on after each block's computation (blocking).
  p.supportsContextParallel = true;
  p.contextParallelComposes = true;
  p.contextParallelAllGatherKv = true;
  p.contextParallelRing = true;
  p.overlapContextParallelRing = true;
  p.ringBackwardRecomputesStatistics = true;
  p.ringGradientsBlock = true;
  // Memory as the compiled plans hold it (StackProfile.h; tests/e2e/plan_sharding_memory_test.py).
  p.deferredWeightGradients = false; // weight-gradient GEMMs next to their layer (GemmFusion)
  p.backwardPeaksAtItsStart = true;
  p.concatenatedGradientReduction = true;
  p.stashCopiedIntoArena = true;
  p.shardedBuffersInArena = true;
  p.fp32ResidualStream = true;
  p.keepsGatheredLinearInputs = true;
  // Issue 31: ZeRO-3 with `--overlap on` (StackProfile::overlaps: only there):
  // mega-schedule-latency-hiding makes each parameter all-gather a start/done pair and
  // mega-training-zero-prefetch starts a layer's gathers just before the previous layer's
  // compute (two gathered layers live or in flight; e2e_zero_prefetch_plan asserts both on a
  // compiled plan). Without --overlap the gathers block, one gathered layer at a time. Under
  // mixed precision ZeRO-3 gathers the f32 master shard and casts each gathered copy.
  p.prefetchShardedParams = true;
  p.gathersMasterWeights = true;
  // ZeRO-2/3's gradient reduce-scatters likewise, with --overlap on: latency hiding starts each
  // right after its gradient and completes it at the function's end, then adds it into the
  // shard (e2e_zero_prefetch_plan asserts it); without --overlap they block.
  p.overlapShardedGradReduce = true;
  // Issue 29: the dp reduction and ZeRO-1's gather overlap as `--overlap on` compiles them
  // (mega-training-fuse-last-micro-batch at pp 1, mega-schedule-latency-hiding).
  p.overlapFollowsPlan = true;
  if (cpu) {
    p.supportsExpertParallel = true;
    p.expertsOnKernelThreads = true;
    p.halfCastInstructions = true;
    p.halfMathInF32 = true;
    return p;
  }
  p.flashAttention = true;
  p.fusedSoftmax = true;
  p.fusedBiasActivation = true;
  p.elementwiseFusion = true;
  p.p2pThroughHost = true;
  return p;
}

// Megatron-LM 2021-22 (Narayanan et al. SC21; Korthikanti et al. 2022; BLOOM's and MT-NLG's
// Megatron-DeepSpeed): fused bias-GeLU, FusedScaleMaskSoftmax, bias_dropout_add, apex
// LayerNorm, apex FusedAdam (multi-tensor); the attention core is baddbmm / softmax / dropout /
// bmm over materialised scores (no flash attention); cuBLAS takes weight transposes as flags;
// the context is permuted back with one copy; weight gradients go to an fp32 main_grad by a
// separate add; the data-parallel all-reduce runs after the backward (no overlap).
/// What both Megatron generations do: fused softmax, bias-activation and bias-dropout-add, a
/// multi-tensor optimizer, a clip pass, scatter-gather p2p and per-layer recomputation.
StackProfile megatronFamily(const char *name, const char *description) {
  StackProfile p;
  p.name = name;
  p.description = description;
  p.fusedSoftmax = true;
  p.fusedBiasActivation = true;
  p.fusedBiasDropoutAdd = true;
  p.multiTensorOptimizer = true;
  p.clipPass = true;
  p.p2pScatterGather = true;
  p.recomputePerLayer = true;
  // PyTorch eager: every kernel issued from Python (StackProfile.h, hostSecondsPerKernel).
  p.hostSecondsPerKernel = 10e-6;
  return p;
}

StackProfile megatron2021() {
  StackProfile p =
      megatronFamily("megatron-2021", "Megatron-LM 2021-22: fused bias-GeLU, fused masked "
                                      "softmax, apex LayerNorm, no flash attention, no "
                                      "gradient-reduction overlap");
  p.headCopies = 1;
  p.separateGradAccumulation = true;
  // baddbmm -> FusedScaleMaskSoftmax -> dropout -> bmm: autograd saves the probabilities, the
  // dropout mask and the dropped-out probabilities (Korthikanti et al. 2022, section 4.1).
  p.keepsAttentionScores = true;
  return p;
}

// Megatron-DeepSpeed (bigscience-workshop/Megatron-DeepSpeed, microsoft/Megatron-DeepSpeed:
// BLOOM-176B, MT-NLG 530B): Megatron's 2021 layers (the kernels, attention core, recompute and
// memory of megatron-2021) under DeepSpeed's pipeline engine, which differs in what it sends and
// how it drives the schedule (StackProfile.h): its p2p sends the whole activation from every
// tensor-parallel rank (deepspeed/runtime/pipe/p2p.py; no SC21 scatter/gather), it runs 1F1B
// without interleaving (deepspeed/runtime/pipe/schedule.py TrainSchedule), and it pays a host
// cost per pipeline step (the one fitted constant, on the set's fit run, MT-NLG at 280 nodes).
StackProfile megatronDeepSpeed() {
  StackProfile p = megatron2021();
  p.name = "megatron-deepspeed";
  p.description = "Megatron-DeepSpeed (BLOOM, MT-NLG): Megatron 2021 layers under DeepSpeed's "
                  "pipeline engine (whole-tensor p2p, host-driven 1F1B)";
  p.p2pScatterGather = false;
  p.pipelineStepOverheadSeconds = 0.01552;
  return p;
}

// Megatron-Core (2023-): flash attention (TE/cuDNN), gradient accumulation fused into the wgrad
// GEMM, --overlap-grad-reduce and --overlap-param-gather with the distributed optimizer.
StackProfile megatronCore() {
  StackProfile p =
      megatronFamily("megatron-core", "Megatron-Core: flash attention, fused kernels, overlapped "
                                      "gradient reduction and parameter all-gather");
  p.flashAttention = true;
  // TE / flash-attn save q, k, v, the output and softmax_lse ([b, heads, s] fp32); selective
  // recompute (recompute_modules ["core_attn"], the default) checkpoints the core attention,
  // which then keeps only its inputs: with flash kernels that saves the logsumexp alone
  // (Megatron Bridge's activation-recomputation guide: TE fused and flash attention already
  // rematerialise the attention internals).
  p.keepsAttentionLse = true;
  p.overlapGradReduce = true;
  p.overlapParamGather = true;
  // ZeRO-3 / FSDP: the parameter gathers prefetched a layer ahead and the reduce-scatters
  // overlapped (Megatron-Core's --data-parallel-sharding-strategy optim_grads_params with
  // overlap, torchtitan's FSDP2 prefetch). Context parallelism: the p2p ring of K/V blocks
  // overlapped with the block computation (--cp-comm-type p2p, the default).
  p.prefetchShardedParams = true;
  p.supportsContextParallel = true;
  p.contextParallelRing = true;
  p.overlapContextParallelRing = true;
  p.contextParallelComposes = true;
  // MoE (Megatron-Core's moe/README.md): --expert-model-parallel-size with the alltoall
  // dispatcher (--moe-token-dispatcher-type alltoall), expert tensor parallelism equal to tp by
  // default, --moe-grouped-gemm and
  // --moe-permute-fusion (packed [T·k, h] routed tokens).
  p.supportsExpertParallel = true;
  p.expertTensorParallel = true;
  p.packedRouting = true;
  p.groupedExpertGemms = true;
  p.allToAllDispatch = true;
  return p;
}

} // namespace

std::vector<std::string> stackNames() {
  return {"megac", "megatron-2021", "megatron-deepspeed", "megatron-core"};
}

std::optional<StackProfile> stackProfile(const std::string &name, bool cpuDevice) {
  if (name == "megac")
    return megac(cpuDevice);
  if (name == "megatron-2021")
    return megatron2021();
  if (name == "megatron-deepspeed")
    return megatronDeepSpeed();
  if (name == "megatron-core")
    return megatronCore();
  return std::nullopt;
}

} // namespace megac::planner
