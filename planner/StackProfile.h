// Software-stack profiles (issue 15): what a training stack fuses and overlaps. A prediction is
// for a hardware spec *and* a stack; published runs are compared with the stack that produced
// them. MLIR-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace megac::planner {

struct StackProfile {
  std::string name;        // "megac", "megatron-2021", "megatron-deepspeed", "megatron-core"
  std::string description; // one line, for --help and docs

  /// The attention core as one kernel that never writes the s x s scores (FlashAttention-2
  /// style); otherwise two batched GEMMs around a softmax over materialised scores.
  bool flashAttention = false;
  /// The attention core as one kernel per pass even without flash tiling (megac's CPU
  /// Attention/AttentionGrad instructions: a loop over heads, one head's s x t probabilities in
  /// a scratch buffer; runtime/cpu/Nn.cpp, Grad.cpp). Implied by flashAttention.
  bool attentionKernel = false;

  // Activation memory (CostModel.cpp, layerActivationBytes).
  /// The softmax output, its dropout mask and dropout output (Korthikanti's 5·a·s/h per s·b·h)
  /// stay in memory from the forward to the backward (Megatron 2021's baddbmm/softmax/bmm core,
  /// autograd saving each). Flash kernels, and megac's, whose AttentionGrad recomputes the
  /// probabilities from q and k, keep none.
  bool keepsAttentionScores = false;
  /// The forward saves each query row's fp32 logsumexp (b·heads·s·4 bytes) for the backward
  /// (FlashAttention-2, cuDNN/TE fused attention: softmax_lse); megac's CUDA backward recomputes
  /// it in a stats pass (runtime/cuda/kernels/Attention.cu), its CPU kernel keeps no statistics.
  bool keepsAttentionLse = false;
  /// Selective recompute does not keep the attention core's output: the backward recomputes it
  /// for the output projection's weight gradient (megac: mega-schedule's split stashes no
  /// mega.attention result, passes/schedule/Passes.td), 2·s·b·h/t fewer bytes. Megatron's
  /// checkpointed core attention returns its output to the projection, which saves it.
  bool selectiveDropsAttentionOutput = false;
  /// Scale, causal mask and softmax in one kernel (Megatron's FusedScaleMaskSoftmax); otherwise
  /// the mask is its own pass over the scores.
  bool fusedSoftmax = false;
  /// Bias + activation in one kernel (Megatron's bias-GeLU, megac's NVRTC fusion); otherwise the
  /// bias add is a pass of its own over the MLP's activations.
  bool fusedBiasActivation = false;
  /// Bias + dropout + residual add in one kernel (Megatron's bias_dropout_add).
  bool fusedBiasDropoutAdd = false;
  /// Any chain of elementwise ops is one kernel (megac CUDA: NVRTC elementwise fusion).
  bool elementwiseFusion = false;
  /// Weight transposes run as separate copy instructions before GEMMs (megac before issue 30);
  /// cuBLAS-based stacks, and megac's plans since mega-training-gemm-fusion, pass transposes to
  /// the GEMM as flags instead.
  bool transposeInstructions = false;
  /// Head split/merge of q, k, v and the attention output as copies (megac: four transposes
  /// each way); Megatron's 2021 core reads strided views, copying only the merged context.
  int headCopies = 0;
  /// Weight gradients accumulated into an fp32 main-grad buffer by a separate pass per
  /// micro-batch (Megatron 2021 without --gradient-accumulation-fusion, megac's accumulators).
  bool separateGradAccumulation = false;
  /// With separateGradAccumulation: weight-matrix gradients accumulate inside their GEMM
  /// (beta = 1: megac's mega-training-gemm-fusion, Megatron's --gradient-accumulation-fusion for
  /// the matrices), so only the vectors (biases, norm weights) and the embedding table keep an
  /// add of their own per micro-batch. Under bf16/fp16 only with gemmAccumulatesHalfWeightGrads.
  bool gemmAccumulatesWeightGrads = false;
  /// With gemmAccumulatesWeightGrads, in bf16/fp16 steps too: the weight-gradient GEMM reads its
  /// half operands into the fp32 accumulator (cuBLASLt bf16/f16 A and B, f32 C and D; megac's
  /// mega-training-gemm-fusion since issue 30, e2e_gemm_layout counts no widening add in the
  /// partition suite's bf16/fp16 plans). Otherwise a half step widens each weight gradient's
  /// product and adds it. MoE expert weight gradients (megac's moe_matmul_weight_grad, which has
  /// no half-into-f32 form) keep their widened add under bf16/fp16 either way.
  bool gemmAccumulatesHalfWeightGrads = false;
  /// The data-parallel gradient reduction runs during the backward (bucketed); otherwise it
  /// follows the last micro-batch's backward and is exposed.
  bool overlapGradReduce = false;
  /// ZeRO-1's parameter all-gather overlaps the next step's forward.
  bool overlapParamGather = false;
  /// The stack overlaps the dp reduction and ZeRO-1's parameter gather only as its compiled plan
  /// does (megac, issue 29): with the plan's latency-hiding schedule (`latencyHiding`, `megac
  /// train --overlap on`) at pp 1 and ZeRO 0/1 over more than one bucket, each bucket's reduction
  /// starts when its gradients are final (the last micro-batch's backward and the update are one
  /// function) and each bucket's ZeRO-1/2 all-gather is deferred into the next step's first
  /// forward (mega-training-defer-parameter-gather): all start at its top in the order the
  /// forward needs them and each completes before its first layer, so the first bucket's gather
  /// and what exceeds that forward are exposed. overlapGradReduce/overlapParamGather then stay
  /// off (their Megatron forms: per block).
  bool overlapFollowsPlan = false;
  /// The compiled plan's options the prediction is for (`megac plan --cluster ... --overlap on
  /// --bucket-size N`; megac train's defaults: off, 0 = Megatron's max(40M, 1M x dp) elements).
  bool latencyHiding = false;
  int64_t bucketSize = 0;
  /// Whether an overlap the stack's runtime has (prefetchShardedParams,
  /// overlapShardedGradReduce) is in the predicted plan: always on other stacks; on megac
  /// (overlapFollowsPlan) only in plans compiled with the latency-hiding schedule, without which
  /// every collective blocks.
  bool overlaps(bool property) const { return property && (!overlapFollowsPlan || latencyHiding); }
  /// ZeRO-2/3 (issue 31): the per-micro-batch gradient reduce-scatter and ZeRO-3's parameter
  /// all-gathers (before each layer's forward and again before its backward) are issued a layer
  /// ahead and run under the neighbouring layer's compute (Megatron-Core's and torchtitan/FSDP2's
  /// prefetch); two gathered layers are then in flight. Otherwise each collective runs
  /// start/done around its use and blocks (megac's runtime today), one gathered layer in flight.
  bool prefetchShardedParams = false;
  /// ZeRO-2/3's per-micro-batch gradient reduce-scatters start as each gradient is final and
  /// are done at their function's end (or once older ones fill the in-flight budget), so they
  /// run under the rest of that chunk's backward, sharing the link with its regathers (megac
  /// with --overlap on: mega-schedule-latency-hiding; e2e_zero_prefetch_plan asserts it on
  /// compiled plans). Exposed: what the backward cannot cover, and at least each chunk
  /// function's last ones (its first block's; the embedding table's on the first stage).
  /// Stacks with overlapGradReduce hide them by that flag's rule instead.
  bool overlapShardedGradReduce = false;
  /// ZeRO-3 under mixed precision (issue 31): a parameter is stored only as its f32 master shard
  /// (counted in the optimizer state), all-gathered and cast to bf16/fp16 right after each
  /// gather (megac: passes/training/ZeroSharding.h, gatherParameters), so no sharded
  /// half-precision copy is stored. Otherwise (FSDP's param_dtype) a 2-byte shard is. (The
  /// gathers then carry the f32 master, twice the bytes the model's collective is charged:
  /// docs/planner.md, Known gaps.)
  bool gathersMasterWeights = false;

  // Context parallelism (issue 32): each sequence split over cp ranks with causal load
  // balancing (rank i holds chunks i and 2·cp - 1 - i, so each does 1/cp of the causal work).
  /// cp > 1 is built; a stack without it plans cp = 1 only.
  bool supportsContextParallel = false;
  /// The variants of cp's K/V exchange the stack runs (Megatron/TE's cp_comm_type).
  /// All-gather-kv: attention's K/V all-gathered over cp before the core (the whole sequence's
  /// [b, S, hk, d] pair in flight, per layer, forward and again backward) and dK/dV
  /// reduce-scattered after the backward, blocking ("all_gather").
  bool contextParallelAllGatherKv = false;
  /// The ring: cp - 1 point-to-point transfers of one K/V block per layer forward, twice that
  /// backward (K/V and dK/dV), two blocks in flight ("p2p"). A stack with both variants runs the
  /// one the layout asks for (Layout::cpRing, `--cp-comm-type`; the search tries both), a stack
  /// with one runs that one whatever the layout says.
  bool contextParallelRing = false;
  /// megac's ring (runtime/exec/RingAttention.cpp): the backward first re-runs the forward ring
  /// for the row statistics (cp - 1 more K/V transfers, one more forward attention), and each
  /// block's dK/dV travel to the next rank after its computation, blocking (cp transfers).
  bool ringBackwardRecomputesStatistics = false;
  bool ringGradientsBlock = false;
  /// Whether a layout that asks for the ring (`requested`) runs it on this stack.
  bool runsContextParallelRing(bool requested) const {
    return contextParallelRing && (requested || !contextParallelAllGatherKv);
  }
  /// The ring's transfers run under the block computation of the previous step (Megatron-Core:
  /// each p2p send/recv overlaps attention on the block already here); exposed only where a
  /// transfer outlasts one block's attention.
  bool overlapContextParallelRing = false;
  /// cp composes with pipeline, expert parallelism and ZeRO (Megatron-Core). megac's first slice
  /// (passes/partition/ContextParallel.cpp, docs/context-parallel.md) refuses cp with pp, ep or
  /// zero > 0, so a stack without this flag plans cp with tp and dp only: the planner never
  /// offers a layout the compiler refuses.
  bool contextParallelComposes = false;
  /// Megatron's scatter/gather of pipeline sends across nodes (SC21 section 4.1).
  bool p2pScatterGather = false;
  /// The zero-bubble pipeline schedules zb-h1, zb-h2 and zbv (Qi et al. 2024; docs/pipeline.md:
  /// the backward split into B and W, issue 35) are built, so the search tries them. Megatron-LM
  /// has none (its issue #1399).
  bool zeroBubbleSchedules = false;
  /// A fixed host-side cost per pipeline step (one chunk's forward or backward of one
  /// micro-batch) on every stage's critical path when pp > 1: DeepSpeed's PipelineEngine
  /// interprets its schedule on the host one instruction at a time (LoadMicroBatch, ForwardPass,
  /// SendActivation, RecvActivation, BackwardPass, SendGrad, RecvGrad; deepspeed/runtime/pipe/
  /// engine.py, schedule.py), each transfer a blocking torch.distributed broadcast in a two-rank
  /// group (deepspeed/runtime/pipe/p2p.py). A fitted constant (docs/planner.md, "Blind
  /// protocol": megatron-deepspeed's only one, fitted on MT-NLG 530B at 280 nodes); 0 elsewhere.
  double pipelineStepOverheadSeconds = 0;
  /// Host (CPU) time to issue one kernel (issue 34): a PyTorch eager stack runs Python, the
  /// pybind boundary, autograd's recording, the ATen dispatcher and cudaLaunchKernel for every
  /// kernel. Launches are asynchronous (the host runs ahead through the stream's queue), so a
  /// pass is bound by them only where its kernels' host time exceeds their device time (small
  /// models, short kernels); the planner charges max(device, host) per pass (KernelModel). An
  /// assumption, not fitted: 10 µs, the low middle of the 5–25 µs of CPU work per eager op of
  /// the dispatch chain's parts (docs/planner.md). 0: megac's executors (C++, no Python; the CPU
  /// runtime's dispatch is the calibrated instructionSeconds).
  double hostSecondsPerKernel = 0;
  /// Full recompute checkpoints each layer's input (Megatron's --recompute-method uniform,
  /// one layer); megac stashes each chunk's input and recomputes the chunk at once.
  bool recomputePerLayer = false;
  /// Full recompute repeats only the forward work whose results the backward reads: megac's
  /// compiler drops, from the recomputed forward, the attention output projection and fc2 GEMMs,
  /// their tensor-parallel reduction, the row-parallel biases and the residual adds (nothing
  /// reads them), and recomputes the LM head's logits GEMM for the loss gradient; Megatron's
  /// checkpoint re-runs each layer's whole forward. e2e_plan_kernels checks it against a trace.
  bool recomputeDropsUnreadForward = false;
  /// Memory as megac's compiler lays it out (docs/planner.md "Memory per device"; measured on
  /// compiled plans by `megac plan --ranks N --json`'s arena listing):
  /// - deferredWeightGradients: the weight-gradient GEMMs of a chunk run after all its input
  ///   gradients, so every layer's recomputed activations live at the backward's end: full
  ///   recompute keeps the stash down to the chunk inputs but not the backward's peak (a chunk's
  ///   activations, not one layer's). megac did until mega-training-gemm-fusion raised each
  ///   accumulating GEMM to its layer (2026-12-04); off since;
  /// - backwardPeaksAtItsStart: without deferred weight gradients the backward frees each
  ///   block's stash and activation gradients as the block's gradients are made, so its peak is
  ///   its start (the stash and the logits' gradient), with no transient block on top;
  /// - the pipeline runner keeps each micro-batch's stash outside the arena and the backward
  ///   reads it as pinned inputs, so one micro-batch's stash is held twice;
  /// - ZeRO-2's whole-gradient bucket and ZeRO-3's gathered unit are arena buffers that are
  ///   dead at the backward's peak (the deferred weight gradients need no weights): they add
  ///   only what exceeds the backward's transient.
  /// - under mixed precision the residual stream, so the block input and both norms' inputs,
  ///   stay fp32;
  bool deferredWeightGradients = false;
  bool backwardPeaksAtItsStart = false;
  /// Without ZeRO, the gradient reduction concatenates the stage's gradients into one buffer
  /// and all-reduces it into another, in the arena (megac's apply_gradients; Megatron reduces
  /// its contiguous gradient buffer in place).
  bool concatenatedGradientReduction = false;
  bool fp32ResidualStream = false;
  /// - under sequence parallelism the all-gathered inputs of the column-parallel linears are
  ///   stashed whole for their weight gradients (Megatron re-gathers them in the backward).
  bool keepsGatheredLinearInputs = false;
  bool stashCopiedIntoArena = false;
  bool shardedBuffersInArena = false;
  /// Pipeline sends staged through host memory (megac CUDA today): two extra PCIe copies.
  bool p2pThroughHost = false;
  /// The optimizer as a few multi-tensor kernels (apex / TE fused Adam) rather than one kernel
  /// per parameter tensor.
  bool multiTensorOptimizer = false;
  /// Gradient clipping as its own pass over the gradients (apex's multi_tensor_scale). megac
  /// folds the clip into its multi-tensor AdamW (off; e2e_gemm_layout asserts it).
  bool clipPass = false;
  /// Fewer key/value heads than tp: each kv head replicated over the ranks whose query heads
  /// read it (megac); Megatron-Core refuses such a tp.
  bool replicatesKvHeads = false;

  // What megac's training graphs run as kernels of their own (the zoo's and Hugging Face
  // exports' graphs after autodiff; tests/e2e/plan_kernels_test.py checks the counts against
  // `megac train --trace`). Megatron's hand-written modules fuse or skip each of them.
  /// q, k and v, and a gated MLP's gate and up projections, as one linear each (megac's graphs);
  /// otherwise one fused column-parallel GEMM each (Megatron's linear_qkv and gated linear_fc1).
  bool separateProjections = false;
  /// Rotary embedding as one kernel per rotated tensor, q and k (megac's mega.rope); otherwise
  /// one fused kernel for both (Megatron's apply_rotary_pos_emb fused rope).
  bool ropePerTensor = false;
  /// A row-parallel linear's bias added by a broadcast kernel of its own after the tp sum
  /// (megac's graph, tp > 1); otherwise it rides in the bias-dropout-add fusion
  /// (Megatron's skip_bias_add).
  bool rowParallelBiasKernel = false;
  /// Learned position embeddings broadcast over the batch by a kernel of their own before the
  /// add (megac's mega.broadcast); otherwise a broadcasting add reads the [s, h] table.
  bool positionBroadcastKernel = false;
  /// The embedding's backward extras as kernels: the first block's two input gradients summed,
  /// the learned positions' gradient as a row sum, rope's backward table (-swap_halves(sin):
  /// a negation, two slices and a concat) built each step (megac's autodiff).
  bool embeddingGradKernels = false;
  /// The vocab-parallel cross entropy as one kernel reading the logits once, and its backward
  /// as one (megac's CrossEntropy instructions); otherwise Megatron's fp32 passes (cast, max,
  /// subtract, exp, sum, log, target: tensor_parallel/cross_entropy.py).
  bool fusedCrossEntropy = false;
  /// The loss' mean over tokens and the loss scale as kernels of their own, and the scaled
  /// gradient broadcast back (megac's graph of the loss).
  bool lossKernels = false;
  /// With separateGradAccumulation, the embedding table (an untied head), learned positions and
  /// the final norm are accumulated too, one add each (megac's accumulators cover every
  /// parameter tensor); the Megatron profiles charge the blocks' main_grad adds only.
  bool accumulatesEdgeGradients = false;
  /// On several ranks the global norm is one norm kernel per group of gradients split over the
  /// same mesh axes (replicated; tp-split; the experts' ep-split), each squared back, the groups'
  /// sums all-reduced and added, one square root (megac's partitioned norm,
  /// passes/training/TrainingOptimizer.cpp); otherwise one multi-tensor L2-norm pass (apex
  /// multi_tensor_l2norm).
  bool groupedGlobalNorm = false;
  /// Under data parallelism the gradients are concatenated into one buffer for the reduction
  /// and sliced back per tensor (megac's @apply_gradients); Megatron reduces its contiguous
  /// grad buffer in place.
  bool concatenatesGradients = false;

  // Mixture of experts (docs/moe.md, "Planner").
  /// Expert parallelism (Layout::ep > 1) is built: the experts of a layer split over ep ranks
  /// carved out of dp, tokens exchanged by all-to-all. A stack without it plans ep = 1 only.
  bool supportsExpertParallel = false;
  /// The experts are split over tp like the dense MLP (Megatron-Core: --expert-tensor-parallel-
  /// size defaults to tp; the routed tokens are all-gathered over tp before the experts and
  /// reduce-scattered after); otherwise every tensor-parallel rank runs whole experts on its
  /// own tokens (megac: the experts are replicated over tp, the tokens split under SP).
  bool expertTensorParallel = false;
  /// Routed tokens packed, T·k rows per micro-batch (Megatron's permute into a [T·k, h]
  /// buffer, grouped GEMMs over the local experts); otherwise megac's static [E, T, h] layout
  /// whose memory-bound passes and saved activations span E·T rows (its GEMMs still compute
  /// the T·k active rows only), one GEMM launch per local expert.
  bool packedRouting = false;
  /// Each expert matrix of a layer is one launch over the local experts (Megatron-Core's
  /// --moe-grouped-gemm; megac's moe_matmul and moe_matmul_weight_grad instructions); otherwise
  /// one GEMM per local expert.
  bool groupedExpertGemms = false;
  /// A grouped expert product runs its experts side by side on the rank's kernel threads, each
  /// expert's product on one thread, when there are at least as many local experts as threads
  /// (megac's CPU runtime, runtime/cpu/Moe.cpp forEachExpert): ceil(E / T) rounds of one
  /// expert's single-thread product, at the rate of T single-thread ranks sharing the node.
  bool expertsOnKernelThreads = false;
  /// Under bf16/fp16, mixed precision as mega-training-precision compiles it, with its casts as
  /// instructions of their own (megac's CPU runtime; issue 34): each half-consumed parameter (the
  /// linears' weights and biases, the embedding and position tables) cast once per micro-batch;
  /// the norms and the loss computed in f32 (f32 bytes), each norm's input widened and output
  /// narrowed, its gradient's the same, the logits widened and their gradient narrowed, each
  /// bias gradient and the tables' gradients widened before their f32 accumulation.
  bool halfCastInstructions = false;
  /// Under bf16/fp16 the arithmetic kernels run in f32 on widened copies of their half operands
  /// and round their results once (megac's CPU runtime, runtime/cpu/HalfCompute.cpp
  /// computeInF32): charged as the f32 kernel plus one conversion of each half operand at the
  /// calibrated cast rate (KernelModel; data movement stays at half bytes).
  bool halfMathInF32 = false;
  /// The router's renormalisation and the load-balancing loss run op by op as megac compiles
  /// them (docs/moe.md; e2e_plan_kernels checks the counts): forward 3 elementwise passes, 5
  /// reductions and a broadcast over [T, E] and a few scalar ops per layer; backward 7
  /// elementwise passes, 2 broadcasts and a reduction over [T, E]; per micro-batch the loss'
  /// gradient seed (2 scalar products, 2 small broadcasts) and the per-layer statistics stacked
  /// (a concat). Otherwise a fused estimate (4 elementwise kernels and 2 reductions forward, 3
  /// elementwise backward).
  bool routerOpByOp = false;
  /// Under expert parallelism, tokens reach their experts' ranks by all-to-all (Megatron's
  /// alltoall dispatcher and megac's moe_exchange: T·k rows of h per rank each way); otherwise
  /// the all-gather dispatcher: the ep group's tokens gathered before the experts and the
  /// combine's partial sums reduce-scattered after (ep·T rows of h each way).
  bool allToAllDispatch = false;
  /// The dispatch (and the combine's adjoint) writes each token times its gate into its experts'
  /// rows, zeros elsewhere (megac's moe_dispatch: an elementwise product over [E, T, h]); otherwise
  /// a permutation copy of the routed rows (Megatron's token permutation; the gates apply at the
  /// combine).
  bool dispatchScalesTokens = false;
  /// The routing ([T, E] 0/1) is all-gathered over ep before the exchange (megac places rows by
  /// token, so each rank needs the group's routing, not only per-expert counts).
  bool gathersRouting = false;
  /// ZeRO-1 shards every parameter's optimizer state over the mesh's dp axis, the dp/ep ranks
  /// holding the same experts (megac: dense parameters' state then dp/ep ways, and ZeRO-1 with
  /// dp = ep shards nothing and is refused); otherwise dense state over all dp ranks (Megatron's
  /// distributed optimizer), the experts' over dp/ep.
  bool zeroOverExpertDataParallel = false;
};

/// The built-in profiles: megac (the stack this build runs: its CUDA runtime on GPUs, its
/// in-order CPU runtime on CPU devices), megatron-2021, megatron-deepspeed, megatron-core.
std::vector<std::string> stackNames();
/// `name` on `device` ("cpu" devices run megac's CPU runtime; others its CUDA runtime).
std::optional<StackProfile> stackProfile(const std::string &name, bool cpuDevice);

} // namespace megac::planner
