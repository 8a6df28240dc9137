// Software-stack profiles (issue 15): what a training stack fuses and overlaps. A prediction is
// for a hardware spec *and* a stack; published runs are compared with the stack that produced
// them. MLIR-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace megac::planner {

struct StackProfile {
  std::string name;        // "megac", "megatron-2021", "megatron-core"
  std::string description; // one line, for --help and docs

  /// The attention core as one kernel that never writes the s x s scores (FlashAttention-2
  /// style); otherwise two batched GEMMs around a softmax over materialised scores.
  bool flashAttention = false;
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
  /// Weight transposes run as separate copy instructions before GEMMs (megac's runtime today);
  /// cuBLAS-based stacks pass transposes to the GEMM as flags instead.
  bool transposeInstructions = false;
  /// Head split/merge of q, k, v and the attention output as copies (megac: four transposes
  /// each way); Megatron's 2021 core reads strided views, copying only the merged context.
  int headCopies = 0;
  /// Weight gradients accumulated into an fp32 main-grad buffer by a separate pass per
  /// micro-batch (Megatron 2021 without --gradient-accumulation-fusion, megac's accumulators).
  bool separateGradAccumulation = false;
  /// The data-parallel gradient reduction runs during the backward (bucketed); otherwise it
  /// follows the last micro-batch's backward and is exposed.
  bool overlapGradReduce = false;
  /// ZeRO-1's parameter all-gather overlaps the next step's forward.
  bool overlapParamGather = false;
  /// Megatron's scatter/gather of pipeline sends across nodes (SC21 section 4.1).
  bool p2pScatterGather = false;
  /// Full recompute checkpoints each layer's input (Megatron's --recompute-method uniform,
  /// one layer); megac stashes each chunk's input and recomputes the chunk at once.
  bool recomputePerLayer = false;
  /// Pipeline sends staged through host memory (megac CUDA today): two extra PCIe copies.
  bool p2pThroughHost = false;
  /// One instruction at a time, collectives blocking (megac's CPU runtime): no overlap at all.
  bool inOrder = false;
  /// The optimizer as a few multi-tensor kernels (apex / TE fused Adam) rather than one kernel
  /// per parameter tensor.
  bool multiTensorOptimizer = false;
  /// Gradient clipping as its own pass over the gradients (apex's multi_tensor_scale); megac
  /// folds the clip coefficient into AdamW.
  bool clipPass = false;
  /// Fewer key/value heads than tp: each kv head replicated over the ranks whose query heads
  /// read it (megac); Megatron-Core refuses such a tp.
  bool replicatesKvHeads = false;

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
  /// Under expert parallelism, tokens reach their experts' ranks by all-to-all (Megatron's
  /// alltoall dispatcher and megac's moe_exchange: T·k rows of h per rank each way); otherwise
  /// the all-gather dispatcher: the ep group's tokens gathered before the experts and the
  /// combine's partial sums reduce-scattered after (ep·T rows of h each way).
  bool allToAllDispatch = false;
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
/// in-order CPU runtime on CPU devices), megatron-2021, megatron-core.
std::vector<std::string> stackNames();
/// `name` on `device` ("cpu" devices run megac's CPU runtime; others its CUDA runtime).
std::optional<StackProfile> stackProfile(const std::string &name, bool cpuDevice);

} // namespace megac::planner
