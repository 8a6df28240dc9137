// Passes of the partition phase: tensor, sequence and data parallelism as sharding propagation
// followed by spmdize (docs/pipeline.md).
#ifndef MEGA_PARTITION_PASSES_TD
#define MEGA_PARTITION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ContextParallel : Pass<"mega-context-parallel", "mlir::ModuleOp"> {
  let summary = "permute the sequence for context parallelism and mask attention by position";
  let description = [{
    Runs after mega-training-loss (and mixed precision), before mega-sharding-propagation with
    the same `cp`, on @forward_backward (docs/context-parallel.md). Causal load balancing: the
    sequence is cut into 2·cp chunks and permuted so that cp rank i's contiguous S / cp
    positions are chunks i and 2·cp − 1 − i. The pass gathers, by that permutation `P` (an i64
    constant), the token inputs `[b, S]` on dim 1 (input_ids, labels), a learned position table
    `[S, h]` added to the hidden states (GPT's wpe; its gradient becomes a scatter), and the
    rotary tables of the `mega.rope` feeding each attention's query and key; each such
    `mega.gather` is marked `mega.cp_split` (propagation splits the permutation, and so the
    sequence, over cp). Each causal `mega.attention` gets query and key `positions` instead
    (i64 `[S]`: the queries' gathered by `P` and marked, so each rank holds its own S / cp; the
    keys' the constant `P`, as every rank all-gathers k and v in that order) and loses `causal`
    (its query dim may then be split): query i sees key j iff `P[j] <= P[i]`, with nothing of
    size S x S built. The loss is a sum over positions: permuting them changes nothing but the
    order of the sum.

    ```mlir
    // before (cp = 2, S = 8)
    %e = mega.embedding %wte[%ids] : tensor<32x16xf64>, tensor<2x8xi64> -> tensor<2x8x16xf64>
    %o = mega.attention %q, %k, %v causal : (...) -> tensor<2x8x2x8xf64>
    // after
    %P = mega.constant dense<[0, 1, 6, 7, 2, 3, 4, 5]> : tensor<8xi64>
    %ids2 = mega.gather %ids[%P] axis 1 {mega.cp_split} : tensor<2x8xi64>, tensor<8xi64> -> tensor<2x8xi64>
    %o = mega.attention %q, %k, %v positions %qp, %kp : (...) -> tensor<2x8x2x8xf64>
    ```

    With `ring` (Megatron's `cp_comm_type="p2p"`, `--cp-comm-type p2p`) the key positions are
    the queries' (split over cp with them) and each attention is marked
    `{mega.ring_axes = ["cp"]}`: its keys and values stay split with the queries, and the plan's
    RingAttention passes each rank's key/value block around the cp ring instead of all-gathering
    them (docs/context-parallel.md "The ring").

    A key padding mask `[b or 1, 1, 1, S]` computed elementwise from integer token inputs (the
    zoo's attention_mask) stays on the attention beside the positions: those inputs are
    permuted like input_ids, so the mask is split over cp with the keys (all-gathered with k and
    v, or carried around the ring with each block; docs/context-parallel.md "Padded inputs").

    Errors: no mega.attention in the model, a softmax over rank-4 scores (attention the input
    phase did not raise), attention that is not causal self-attention, a mask that is not such
    a key padding mask, a float input over the sequence, a sequence 2·cp does not divide.
  }];
  let options = [
    Option<"cp", "cp", "int64_t", "1", "context-parallel degree (1: the pass does nothing)">,
    Option<"ring", "ring", "bool", "false",
           "ring attention (k/v blocks passed around the cp ranks) instead of all-gathered k/v">,
  ];
  let dependentDialects = ["mega::MegaDialect"];
}

def ContextParallelRegather : Pass<"mega-context-parallel-regather", "mlir::ModuleOp"> {
  let summary = "all-gather context parallelism's keys and values again for the backward";
  let description = [{
    Runs after autodiff (and mega-forward-backward-split) on the per-rank functions that run
    both the forward and the backward (`@forward_backward`; mega-forward-backward-split's rule:
    the backward is what no loss or activation result depends on). Every `mega.all_gather`
    over `cp` (the keys and values each attention reads whole) whose result the backward also
    reads gets a second all-gather of the same shard right before the first backward use,
    marked `mega.regather` (so CSE keeps it), and the backward reads that one: the forward's
    gathered copy dies after the forward attention, and only the 1/cp shard is kept for the
    backward, as ZeRO-3 does for parameters (passes/partition/Regather.h; reshard after
    forward). Pipeline chunks (separate forward and backward functions) are left alone.

    ```mlir
    // before
    %k = mega.all_gather %ks on #mesh axes ["cp"] dim 1 grad_partial : ...
    %o = mega.attention %q, %k, %v positions %qp, %kp : ...
    ... // the rest of the forward, the backward down to this layer
    %dq, %dk, %dv = mega.attention_grad %do, %q, %k, %v positions %qp, %kp : ...
    // after
    %k2 = mega.all_gather %ks on #mesh axes ["cp"] dim 1 grad_partial {mega.regather} : ...
    %dq, %dk, %dv = mega.attention_grad %do, %q, %k2, %v2 positions %qp, %kp : ...
    ```
  }];
  let dependentDialects = ["mega::MegaDialect"];
}

def ShardingPropagation : Pass<"mega-sharding-propagation", "mlir::ModuleOp"> {
  let summary = "choose a sharding for every value of @forward_backward's forward half";
  let description = [{
    Runs after mega-training-loss, before autodiff, on @forward_backward (the model and its
    loss). Sets the module's `mega.mesh = #mega.mesh<pp = P, dp = D, tp = T>` (with `cp`:
    `<pp, dp, cp, tp>`, the gathers mega-context-parallel marks split over cp) and writes every
    value's layout into its type as a `#mega.sharding` encoding; where an operand's layout is not
    the one its user needs, inserts `mega.reshard`. @forward (evaluation) is dropped: it runs on
    one rank.

    Seeds: every `mega.input` with a batch dim is split on dim 0 over dp. Parameters get their
    layout at their first use: a linear weight whose input is split on the contracted dim is
    split on that dim (row parallel), else on its output dim (column parallel); an embedding
    table on its vocab dim (vocab parallel); any other parameter takes the layout its user's
    factors give it. Everything else follows from the ops' sharding rules
    (ir/ShardingRule.h): factors are assigned mesh axes from the operands (parameters first, then
    larger tensors), a sharded reduction factor makes a partial sum, partial sums flow through
    linear ops and are resolved where an op needs whole values: all-reduced, or, with
    `sequence-parallel`, reduce-scattered on the sequence dim (dim 1 of [b, s, ...]).

    Errors: a layout that does not divide (hidden, ffn or heads by tp; batch by dp), naming
    the dim, its size and the degree.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", "1", "tensor-parallel degree">,
    Option<"dp", "dp", "int64_t", "1", "data-parallel degree">,
    Option<"pp", "pp", "int64_t", "1", "pipeline-parallel degree (the mesh's pp axis)">,
    Option<"sequenceParallel", "sequence-parallel", "bool", "false",
           "shard norms and residuals on the sequence dim between tensor-parallel regions">,
    Option<"ep", "ep", "int64_t", "1",
           "expert-parallel degree, carved out of dp (docs/moe.md): the mesh becomes "
           "<pp, dp = dp/ep, ep, tp>, the batch is split over (dp, ep) and the experts over ep">,
    Option<"cp", "cp", "int64_t", "1",
           "context-parallel degree, its own mesh axis <pp, dp, cp, tp> (after "
           "mega-context-parallel): gathers marked mega.cp_split split the sequence over cp">,
  ];
  let dependentDialects = ["mega::MegaDialect"];
}

def Spmdize : Pass<"mega-spmdize", "mlir::ModuleOp"> {
  let summary = "rewrite the sharded @forward_backward to one rank's local shapes";
  let description = [{
    Lowers every `mega.reshard` to collectives over the module's mesh (partial -> whole:
    all_reduce; partial -> split: reduce_scatter; split -> whole: all_gather; whole -> split:
    shard_slice), strips the encodings (types become local shapes), marks vocab-parallel
    embedding and cross_entropy with `vocab_axes`, and inserts `mega.copy_to_shards` where a
    whole activation enters a computation split over some axes (its gradient is summed over
    them). A parameter whose every use is split over axes it is whole on gets
    `mega.grad_partial = [axes]` (its gradient is reduced once per step by apply_gradients);
    parameters and inputs record `mega.global_shape` and `mega.dim_axes`; a result that is a
    partial sum records `mega.partial_axes`.
  }];
  let dependentDialects = ["mega::MegaDialect"];
}

#endif // MEGA_PARTITION_PASSES_TD
