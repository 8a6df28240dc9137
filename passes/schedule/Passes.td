// Passes of the schedule phase: the pipeline split of the training step into stage chunks and
// the forward/backward split with activation recompute (docs/pipeline.md).
#ifndef MEGA_SCHEDULE_PASSES_TD
#define MEGA_SCHEDULE_PASSES_TD

include "mlir/Pass/PassBase.td"

def PipelineSplit : Pass<"mega-pipeline-split", "mlir::ModuleOp"> {
  let summary = "cut the forward half of @forward_backward into pipeline chunks, one module per stage";
  let description = [{
    Runs after mega-training-loss (and mega-partition), before mega-training-autodiff. With
    `stages` P and `virtual-stages` V and P·V > 1, the ops of `@forward_backward` (model and
    loss, in program order) are cut into P·V contiguous chunks; chunk c runs on stage c % P, or
    with `placement=vee` (zbv, V = 2) on stage c for c < P and 2P - 1 - c after
    (parallel/PipelineSchedule.h, stageOfChunk): the first and last chunks share stage 0.

    Cut points are positions in the op list where the activations crossing the cut (values
    computed from the data, defined before and used after it) are fewest in bytes: the residual
    stream between layers. Values that depend only on parameters and constants (a broadcast
    position table, a cast of a weight), or only on data inputs and constants (an attention
    mask), are recomputed in every chunk that reads them instead of crossing. A position is
    eligible when both sides read a parameter; its crossing bytes must be at most twice the
    least (an encoder-decoder's decoder also crosses the encoder's output). Where the segments
    between eligible positions repeat (attention block, MLP block, attention block, ...), only
    the positions between whole periods, the layers, are cut points. Cuts are chosen among them
    to minimize the largest chunk cost (FLOPs plus bytes read and written, from
    mega::CostOpInterface); cut points with exactly the least crossing are preferred unless the
    wider set balances the chunks over 25% better.

    The module becomes one nested `module @stage<s> attributes {mega.stage = s : i64}` per stage
    (with the outer module's `mega.mesh`) holding `@forward_backward.c<c>` for its chunks:
    - arguments: the parameters the chunk reads (same attributes; a parameter read on several
      stages, such as a tied embedding, gets `mega.shared_stages = [s0, s1, ...]`), then for
      c > 0 the crossing activations `{mega.input = "act.c<c>"}` (`act.c<c>.<i>` when several),
      then the data inputs it reads (inputs no op reads, such as `loss_scale`, go to the last
      chunk);
    - results: `{mega.output = "act.c<c+1>"}` (or `.<i>`), or the original results (the loss)
      for the last chunk. An activation crossing several cuts is passed through.
    `@forward` (the evaluation model) is dropped. P·V = 1 changes nothing.

    Errors: P or V < 1; an unknown placement or vee with V != 2; no `@forward_backward` (or one
    without a body of one block); stage modules already present; a model with fewer candidate
    cut points than P·V - 1 ("cannot cut ... into 8 pipeline chunks: 3 cut points for pp=8,
    vpp=1").

    Before (stages=2):
    ```mlir
    func.func @forward_backward(%w0: tensor<4x4xf32> {mega.param = "w0"},
        %w1: tensor<4x4xf32> {mega.param = "w1"}, %x: tensor<2x4xf32> {mega.input = "x"})
        -> (tensor<f32> {mega.output = "loss"}) {
      %h = mega.linear %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
      %y = mega.linear %h, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
      %l = mega.reduce sum %y over [0, 1] : tensor<2x4xf32> -> tensor<f32>
      return %l : tensor<f32>
    }
    ```
    After:
    ```mlir
    module @stage0 attributes {mega.stage = 0 : i64} {
      func.func @forward_backward.c0(%w0: tensor<4x4xf32> {mega.param = "w0"},
          %x: tensor<2x4xf32> {mega.input = "x"}) -> (tensor<2x4xf32> {mega.output = "act.c1"}) {
        %h = mega.linear %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
        return %h : tensor<2x4xf32>
      }
    }
    module @stage1 attributes {mega.stage = 1 : i64} {
      func.func @forward_backward.c1(%w1: tensor<4x4xf32> {mega.param = "w1"},
          %h: tensor<2x4xf32> {mega.input = "act.c1"}) -> (tensor<f32> {mega.output = "loss"}) {
        %y = mega.linear %h, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
        %l = mega.reduce sum %y over [0, 1] : tensor<2x4xf32> -> tensor<f32>
        return %l : tensor<f32>
      }
    }
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"1", "pipeline stages (pp)">,
    Option<"virtualStages", "virtual-stages", "int64_t", /*default=*/"1",
           "model chunks per stage (vpp; interleaved 1F1B when > 1)">,
    Option<"placement", "placement", "std::string", /*default=*/"\"loop\"",
           "where chunk c runs: loop (stage c % stages) or vee (zbv, 2 chunks per stage: stage "
           "s holds chunks s and 2 stages - 1 - s)">,
  ];
}

def ForwardBackwardSplit : Pass<"mega-forward-backward-split", "mlir::ModuleOp"> {
  let summary = "split differentiated chunks into @forward.c<c> and @backward.c<c>, with recompute";
  let description = [{
    Runs after mega-training-autodiff. For every `@forward_backward.c<c>` (in the stage
    modules of mega-pipeline-split) builds
    - `@forward.c<c>`: the ops its forward outputs (`act.c<c+1>` or the loss) need, returning
      them and the residuals `stash.c<c>.<k>` (`mega.output`): the forward values the backward
      reads;
    - `@backward.c<c>`: parameters, the residuals (`mega.input = "stash.c<c>.<k>"`),
      `grad.act.c<c+1>`, the data inputs it reads and the gradient accumulators, returning
      `grad.act.c<c>` and the accumulator updates;
    and deletes `@forward_backward.c<c>` (docs/pipeline.md).

    `recompute` decides which forward values may be stashed: `none`, all of them; `selective`,
    all but the results of `mega.attention` and the reshapes/transposes of them (the backward
    recomputes them from their stashed operands, Megatron's core-attention recompute); `full`,
    only the chunk's own arguments (the backward re-runs the forward ops it needs). A
    non-stashable value the backward reads is recomputed by clones of its producers placed
    just before its first backward use; constants are always cloned, never stashed.

    Without pipeline chunks (pp = 1), the same policy rewrites `@forward_backward` in place:
    the backward's reads of non-stashable forward values go to clones placed before their
    first backward use, so the forward values die early and the memory planner's arena
    shrinks. There, `full` keeps the activations crossing the layer boundaries (the candidate
    cut points of mega-pipeline-split: each layer's input) and recomputes each layer from them,
    Megatron's full recompute; with the function's arguments alone the whole forward would be
    recomputed at once and nothing would be saved.

    Recomputed clones carry the unit attribute `mega.recompute`, so that CSE does not merge
    them back into the forward ops they repeat.

    Errors: an unknown policy; a `@forward_backward.c<c>` or `@forward_backward` that was not
    differentiated (no accumulators) or has no body of one block.

    Before (after mega-training-autodiff; recompute=none):
    ```mlir
    func.func @forward_backward.c1(%w: tensor<4xf32> {mega.param = "w"},
        %h: tensor<4xf32> {mega.input = "act.c1"}, %acc: tensor<4xf32> {mega.state = "grad.w"})
        -> (tensor<f32> {mega.output = "loss"}, tensor<4xf32> {mega.output = "grad.act.c1"},
            tensor<4xf32> {mega.updates = "grad.w"}) {
      %t = mega.tanh %h : tensor<4xf32>
      %y = mega.mul %w, %t : tensor<4xf32>
      %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
      ... d(loss) = 1, %dw = dy * %t, %dh = dy * %w * (1 - %t * %t), %acc2 = %acc + %dw ...
      return %l, %dh, %acc2 : ...
    }
    ```
    After:
    ```mlir
    func.func @forward.c1(%w: tensor<4xf32> {mega.param = "w"},
        %h: tensor<4xf32> {mega.input = "act.c1"})
        -> (tensor<f32> {mega.output = "loss"}, tensor<4xf32> {mega.output = "stash.c1.0"}) {
      %t = mega.tanh %h : tensor<4xf32>
      ...
      return %l, %t : tensor<f32>, tensor<4xf32>
    }
    func.func @backward.c1(%w: tensor<4xf32> {mega.param = "w"},
        %t: tensor<4xf32> {mega.input = "stash.c1.0"}, %acc: tensor<4xf32> {mega.state = "grad.w"})
        -> (tensor<4xf32> {mega.output = "grad.act.c1"}, tensor<4xf32> {mega.updates = "grad.w"})
    ```
    With recompute=full the stash is `%h` itself and the backward recomputes `%t` from it.
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
  let options = [
    Option<"recompute", "recompute", "std::string", /*default=*/"\"none\"",
           "which forward values the backward recomputes: none, selective or full">,
  ];
}

def BackwardWeightSplit : Pass<"mega-backward-weight-split", "mlir::ModuleOp"> {
  let summary = "split each @backward.c<c> into an input-gradient and a weight-gradient function";
  let description = [{
    For the zero-bubble pipeline schedules (`zb-h1`, `zb-h2`, `zbv`; docs/pipeline.md). Runs after
    mega-forward-backward-split (and the optimizer, GEMM fusion: on the final chunk functions).
    Every `@backward.c<c>` becomes
    - `@backward_input.c<c>` (B): the ops its input gradients `grad.act.c<c>` need (recomputed
      forward values included), returning them and the values W reads from it as
      `stash.c<c>.w<k>` (`mega.output`); it lists every incoming `grad.act.c<c+1>`, read or not
      (chunk 0's B is empty: the runner receives the gradient for it, W reads it);
    - `@backward_weight.c<c>` (W): every other op (the weight-gradient GEMMs, the accumulator
      updates `mega.updates = "grad.<p>"` and what only they need, recomputed values only W reads
      included), taking the parameters, stash, incoming gradients and data inputs it reads, every
      accumulator, and `stash.c<c>.w<k>` (`mega.input`); returning the accumulator updates.
    The pipeline runner keeps `stash.c<c>.w<k>`, and the forward stash and incoming gradients W
    reads, per (chunk, micro-batch) from B to W. A value both need is computed once, in B.
    Constants are cloned, never passed.

    Errors: no `@backward.c<c>` in the module (pp = 1 or the split not run); a backward without
    accumulator updates or without a body of one block.

    Before:
    ```mlir
    func.func @backward.c1(%w: tensor<4x4xf32> {mega.param = "w"},
        %x: tensor<2x4xf32> {mega.input = "stash.c1.0"},
        %dy: tensor<2x4xf32> {mega.input = "grad.act.c2"},
        %acc: tensor<4x4xf32> {mega.state = "grad.w"})
        -> (tensor<2x4xf32> {mega.output = "grad.act.c1"}, tensor<4x4xf32> {mega.updates = "grad.w"}) {
      %t = mega.tanh %dy : tensor<2x4xf32>
      %dx = mega.matmul %t, %w : ...
      %dw = mega.matmul %t, %x {transpose_a} : ...
      %acc2 = mega.add %acc, %dw : tensor<4x4xf32>
      return %dx, %acc2 : ...
    }
    ```
    After:
    ```mlir
    func.func @backward_input.c1(%w: ... {mega.param = "w"}, %dy: ... {mega.input = "grad.act.c2"})
        -> (tensor<2x4xf32> {mega.output = "grad.act.c1"},
            tensor<2x4xf32> {mega.output = "stash.c1.w0"})       // %t
    func.func @backward_weight.c1(%x: ... {mega.input = "stash.c1.0"},
        %acc: ... {mega.state = "grad.w"}, %t: ... {mega.input = "stash.c1.w0"})
        -> (tensor<4x4xf32> {mega.updates = "grad.w"})
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
}

def LatencyHiding : Pass<"mega-schedule-latency-hiding", "mlir::ModuleOp"> {
  let summary = "split blocking collectives into start/done pairs and spread them apart";
  let description = [{
    Runs last, on every per-rank function (nested stage modules included): each blocking
    `all_reduce`, `all_gather` and `reduce_scatter` becomes a `*_start` and a
    `mega.collective_done`; each done sinks to just before the first op of its block that reads
    its result (or the terminator), then each start, in program order, rises to just after the
    op defining its input (or the start of the block) — as long as the bytes of collectives in
    flight at every op it passes stay within `max-in-flight-bytes` (an in-flight result keeps
    its buffer live from start to done). A pair with nothing between them stays blocking (the
    forward's row-parallel all-reduces, which the next op needs at once).

    First, a `mega.adamw_update_multi` whose updated parameters feed several `all_gather`s
    (ZeRO-1/2's bucketed parameter gather) is split by the first gather that reads each
    parameter (parameters no gather reads: one update, last), and each bucket's update, packing
    and gather move ahead of the next bucket's update; the unpacking of every bucket follows the
    last update. Each tensor's arithmetic is unchanged.

    ZeRO-2/3's accumulation of a micro-batch gradient into its shard, `acc + reduce_scatter(g)`
    (an add of a block argument reading a reduce-scatter nothing else reads), is scheduled
    last: the add first moves down to just before the first op reading its sum, the
    reduce-scatter starts where it stands (right after its gradient) and is done as late as
    that add, unless the bytes in flight would pass the budget (a reduce-scatter holds its
    whole input): then the oldest such reduce-scatters still in flight are done first, right
    before it starts. The add follows its done. A reduce-scatter of a cast read by nothing else
    (mixed precision's cast of the gradient up to f32, left at the backward's end) first moves
    up with the cast to just after the gradient's definition. So each gradient's reduce-scatter runs under
    the rest of the backward.

    What overlaps (docs/training-step.md "Overlap"): in `@apply_gradients` each bucket's dp
    reduction runs while later buckets are flattened and reduced, and ZeRO-1's parameter
    all-gathers while the remaining buckets' updates run; in a backward, the column-parallel
    input-gradient all-reduce while the weight-gradient GEMM runs. Every start is done in its own
    function, so nothing is in flight at a save, an evaluation, a stop or a skipped fp16 step.

    Before:
    ```mlir
    %r = mega.all_reduce sum %g on #mega.mesh<dp = 2> axes [dp] : tensor<64xf32>
    %y = mega.matmul %a, %b : ...
    %z = mega.add %r, %r : tensor<64xf32>
    ```
    After:
    ```mlir
    %h = mega.all_reduce_start sum %g on #mega.mesh<dp = 2> axes [dp] : tensor<64xf32>
    %y = mega.matmul %a, %b : ...
    %r = mega.collective_done %h : tensor<64xf32>
    %z = mega.add %r, %r : tensor<64xf32>
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
  let options = [
    Option<"maxInFlightBytes", "max-in-flight-bytes", "int64_t", /*default=*/"1073741824",
           "the most bytes of collective results (and reduce-scatter inputs) in flight at "
           "any point (>= 0)">,
  ];
}

#endif // MEGA_SCHEDULE_PASSES_TD
