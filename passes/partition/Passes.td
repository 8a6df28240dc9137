// Passes of the partition phase: tensor, sequence and data parallelism as sharding propagation
// followed by spmdize (docs/pipeline.md).
#ifndef MEGA_PARTITION_PASSES_TD
#define MEGA_PARTITION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ShardingPropagation : Pass<"mega-sharding-propagation", "mlir::ModuleOp"> {
  let summary = "choose a sharding for every value of @forward_backward's forward half";
  let description = [{
    Runs after mega-training-loss, before autodiff, on @forward_backward (the model and its
    loss). Sets the module's `mega.mesh = #mega.mesh<pp = P, dp = D, tp = T>` and writes every
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
