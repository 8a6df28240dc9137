// Passes of the training phase: a forward model becomes @forward_backward and @apply_gradients
// (docs/training-step.md).
#ifndef MEGA_TRAINING_PASSES_TD
#define MEGA_TRAINING_PASSES_TD

include "mlir/Pass/PassBase.td"

def TrainingLoss : Pass<"mega-training-loss", "mlir::ModuleOp"> {
  let summary = "build the forward half of @forward_backward: the model plus its loss";
  let description = [{
    Takes the model function (`function`, default: the module's only function), renames it
    `@forward` (kept for evaluation) and adds `@forward_backward`: a copy of the model with two
    more inputs, `labels` (i64, the logits' shape without the vocab dim) and `loss_normalizer`
    (a 0-d tensor of the logits' float type), returning only

    `loss = reduce_sum(cross_entropy(logits, labels, ignore_index)) * loss_normalizer`

    named `mega.output = "loss"`. The logits are the result named by `logits` (default: the
    model's only floating-point result); its other results are dropped from the copy. All
    loss kinds, `causal` (labels are the inputs shifted by one), `mlm` (labels are the
    masked tokens, `ignore_index` elsewhere) and `seq2seq` (labels are the decoder's targets,
    its inputs shifted right), are this cross-entropy; the data side builds the labels, and the
    kind is recorded as `mega.loss_kind` on @forward_backward.

    Mixture-of-experts layers (one `mega.moe_dispatch` each, its routing weights derived from a
    `mega.topk_mask` of the router probabilities) add their load-balancing loss (and z-loss)
    to the objective through `mega.add_aux_loss` on the dispatched tokens, with statistics per
    sequence and a new input `row_normalizer` (1 / rows of the global batch), and return
    `moe.load` ([layers, experts] routed assignments), `moe.dropped` and `moe.aux_loss`
    (docs/moe.md).

    Errors: an unknown loss kind; no model function (or several and none named); a model
    without a body; an existing @forward_backward, or an @forward that is another function;
    inputs already named `labels` or `loss_normalizer`; logits that are not found (by name, or
    not exactly one float result), not f32/f64 or without a vocab dim.

    Before:
    ```mlir
    func.func @gpt(%wte: tensor<16x8xf32> {mega.param = "wte"},
                   %ids: tensor<2x4xi64> {mega.input = "input_ids"})
        -> (tensor<2x4x16xf32> {mega.output = "logits"}) {
      %h = mega.embedding %wte[%ids] : tensor<16x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
      %z = mega.linear %h, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
      return %z : tensor<2x4x16xf32>
    }
    ```
    After: `@gpt` is `@forward`, and
    ```mlir
    func.func @forward_backward(%wte: ..., %ids: ...,
        %labels: tensor<2x4xi64> {mega.input = "labels"},
        %norm: tensor<f32> {mega.input = "loss_normalizer"})
        -> (tensor<f32> {mega.output = "loss"}) attributes {mega.loss_kind = "causal"} {
      ...
      %ce = mega.cross_entropy %z, %labels {ignore_index = -100 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64> -> tensor<2x4xf32>
      %s = mega.reduce sum %ce over [0, 1] : tensor<2x4xf32> -> tensor<f32>
      %loss = mega.mul %s, %norm : tensor<f32>
      return %loss : tensor<f32>
    }
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"\"",
           "the model function (default: the module's only function)">,
    Option<"logits", "logits", "std::string", /*default=*/"\"\"",
           "the mega.output name of the logits (default: the only floating-point result)">,
    Option<"ignoreIndex", "ignore-index", "int64_t", /*default=*/"-100",
           "label value that gets no loss (PyTorch's ignore_index)">,
    Option<"lossKind", "loss-kind", "std::string", /*default=*/"\"causal\"",
           "causal (next-token), mlm (masked tokens) or seq2seq (decoder targets); all are "
           "cross-entropy over the labels">,
    Option<"moeAuxLossCoeff", "moe-aux-loss-coeff", "double", /*default=*/"0.01",
           "coefficient of the mixture-of-experts load-balancing loss (docs/moe.md)">,
    Option<"moeZLossCoeff", "moe-z-loss-coeff", "double", /*default=*/"0.0",
           "coefficient of the router z-loss (0: none)">,
  ];
}

def TrainingPrecision : Pass<"mega-training-precision", "mlir::ModuleOp"> {
  let summary = "the training precision: f64 everywhere, or bf16/fp16 mixed precision";
  let description = [{
    `precision=fp32` changes nothing. `precision=fp64` converts every f32 tensor of the module
    (signatures, block arguments, results, constant values, rounded to nearest even) to f64; it
    may run at any stage (buildTrainingStep runs it first, on the model).

    `precision=bf16|fp16` rewrites `@forward_backward` after mega-training-loss and BEFORE
    mega-training-autodiff, so that the backward pass autodiff builds follows the forward's
    precisions through the `mega.cast` gradient rule (a cast's gradient is cast back):
    - parameters stay f32 (the master weights; their accumulators, which autodiff gives the
      parameter's type, and the Adam state are f32) and are cast to half where used, once per
      parameter; every gradient reaching an accumulator goes through that cast's gradient,
      so it is cast up to f32;
    - linear, matmul, attention, gelu, embedding, elementwise ops, data movement and constants
      compute on half tensors;
    - layer_norm, rms_norm and softmax take f32 inputs (cast up) and give f32 results, which
      their half users cast down: their statistics are f32 (the kernels accumulate in double);
    - cross_entropy and everything computed from it (the loss tail: reduce, * normalizer) stay
      f32, so the logits are cast up to f32 before the loss.
    With fp16, `@forward_backward` also gets an input `loss_scale` (0-d f32,
    `mega.input = "loss_scale"`): mega-training-autodiff seeds d(loss) with it instead of 1, so
    every gradient is scaled (dynamic loss scaling); mega-training-optimizer then divides the
    accumulated gradients by it and adds `@check_gradients` (docs/training-step.md).

    Errors: an unknown precision; for bf16/fp16: no `@forward_backward` (or one without a
    body), one that was differentiated already (state arguments), one with a `loss_scale`
    input already, or a float argument or operand that is not f32.

    Before (precision=bf16):
    ```mlir
    func.func @forward_backward(%w: tensor<8x4xf32> {mega.param = "w"},
        %x: tensor<2x4xf32> {mega.input = "x"}, %labels: tensor<2xi64> {mega.input = "labels"},
        %norm: tensor<f32> {mega.input = "loss_normalizer"}) -> (tensor<f32> {mega.output = "loss"}) {
      %z = mega.linear %x, %w : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
      %ce = mega.cross_entropy %z, %labels : tensor<2x8xf32>, tensor<2xi64> -> tensor<2xf32>
      ...
    ```
    After:
    ```mlir
      %xh = mega.cast %x : tensor<2x4xf32> -> tensor<2x4xbf16>
      %wh = mega.cast %w : tensor<8x4xf32> -> tensor<8x4xbf16>
      %z = mega.linear %xh, %wh : (tensor<2x4xbf16>, tensor<8x4xbf16>) -> tensor<2x8xbf16>
      %zf = mega.cast %z : tensor<2x8xbf16> -> tensor<2x8xf32>
      %ce = mega.cross_entropy %zf, %labels : tensor<2x8xf32>, tensor<2xi64> -> tensor<2xf32>
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"fp32\"",
           "fp32 (no change), fp64, bf16 or fp16">,
  ];
}

def TrainingAutodiff : Pass<"mega-training-autodiff", "mlir::ModuleOp"> {
  let summary = "append the backward pass and gradient accumulation to @forward_backward";
  let description = [{
    A generic reverse walk over the function (default `@forward_backward`) from its scalar
    result named `loss`: d(loss) = 1 (or, with `loss-scale=NAME` and an input of that name, the
    input's value: the loss scale of fp16 training), and every op between a parameter (`mega.param`
    argument) and the loss builds its operands' gradients from its results' through its
    `mega::GradientOpInterface` (ir/GradientRules.cpp); a value used several times gets the sum
    of its uses' gradients. Only floating-point values carry gradients, so integer ids, masks
    and comparisons end the walk. For every parameter `<p>` the function gains a state argument
    (`mega.state = "grad.<p>"`, the parameter's type) and a result `acc + d(loss)/d(p)`
    (`mega.updates = "grad.<p>"`); a parameter the loss does not depend on gets `acc`
    unchanged. Ops left dead (the unused half of a rule, forward results nobody reads) are
    removed.

    Pipeline chunks (mega-pipeline-split, docs/pipeline.md): every `@<function>.c<c>`, in the
    module or its stage modules, is differentiated too. A result named `act.c<c+1>[.<i>]` is
    seeded by a new argument `mega.input = "grad.act.c<c+1>[.<i>]"` (its type, before the
    accumulators), a chunk without the loss result needs no seed of 1, and the gradient of
    each argument named `act.c<c>[.<i>]` becomes a result `mega.output = "grad.act.c<c>[.<i>]"`
    (zero when nothing depends on it), before the accumulator updates. A parameter's
    `mega.grad_partial` is copied onto its accumulator argument.

    Errors: a function or loss result that is missing or not a 0-d float, a loss-scale input
    of another type than the loss, no parameters, a
    `mega.param` that is not a name or not on a float tensor, accumulators already present, a
    rule that does not cover its op (`gather` off axis 0), and an op on the path
    from a parameter to the loss without a gradient rule ("mega.all_reduce has no gradient
    rule"), located at the op.

    Before:
    ```mlir
    func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"},
                                %x: tensor<4xf32> {mega.input = "x"})
        -> (tensor<f32> {mega.output = "loss"}) {
      %y = mega.mul %w, %x : tensor<4xf32>
      %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
      return %l : tensor<f32>
    }
    ```
    After:
    ```mlir
    func.func @forward_backward(%w: ..., %x: ...,
                                %acc: tensor<4xf32> {mega.state = "grad.w"})
        -> (tensor<f32> {mega.output = "loss"}, tensor<4xf32> {mega.updates = "grad.w"}) {
      ... forward as before ...
      %one = mega.constant dense<1.0> : tensor<f32>
      %r = mega.reshape %one : tensor<f32> -> tensor<1xf32>
      %dy = mega.broadcast %r : tensor<1xf32> -> tensor<4xf32>
      %dw = mega.mul %dy, %x : tensor<4xf32>
      %acc2 = mega.add %acc, %dw : tensor<4xf32>
      return %l, %acc2 : tensor<f32>, tensor<4xf32>
    }
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"forward_backward\"",
           "the function to differentiate">,
    Option<"loss", "loss", "std::string", /*default=*/"\"loss\"",
           "the mega.output name of the scalar to differentiate">,
    Option<"lossScale", "loss-scale", "std::string", /*default=*/"\"\"",
           "seed d(loss) with this 0-d input (mega.input name, the loss's type) instead of 1, "
           "when the function has it (dynamic loss scaling)">,
  ];
}

def TrainingOptimizer : Pass<"mega-training-optimizer", "mlir::ModuleOp"> {
  let summary = "build @apply_gradients: global norm, optional clipping, AdamW per parameter";
  let description = [{
    From the parameters and gradient accumulators of `@forward_backward`, builds

    ```
    @apply_gradients(params, grad.<p> accumulators, adam.m.<p>, adam.v.<p>, lr, step)
        -> (param' {mega.updates = "<p>"} ..., m' ..., v' ..., grad_norm {mega.output})
    ```

    `grad_norm = global_norm(accumulators)` (before clipping); with `clip-grad > 0` every
    gradient is `clip_by_norm`'d by it first; then one `adamw_update` per parameter
    (`torch.optim.AdamW`), with `weight-decay` on parameters of rank >= 2 and none on the
    others (biases, norm weights). With dynamic loss scaling (`@forward_backward` has an input
    `loss_scale`, added by mega-training-precision for fp16), @apply_gradients takes that
    input too and divides every accumulated gradient by it before the norm, clipping and
    AdamW, and the pass adds

    `@check_gradients(grad.<p> accumulators, loss_scale) -> unscaled_grad_norm`
    (`global_norm(accumulators) / loss_scale`, `mega.output = "unscaled_grad_norm"`), which the
    runtime runs first: a non-finite norm means the step overflowed and is skipped. `lr` is a 0-d tensor of the parameters' float type (f64 when
    every parameter is f64, else f32), `step` a 0-d i64 tensor (1-based). Parameters keep their
    `mega.param`/`mega.init` attributes: a name is the same storage in every function.

    Errors: hyperparameters out of range, no `@forward_backward`, one without parameters or
    with a parameter that is not a float tensor or has no accumulator (run
    mega-training-autodiff first), an existing `@apply_gradients` (or `@check_gradients` with a
    loss scale), a loss_scale that is not a 0-d tensor of the parameters' type, a
    negative `bucket-size`.

    Partitioned modules (a `mega.mesh` of several devices, docs/pipeline.md) get the same
    function over local shapes, built per pipeline stage (each nested `mega.stage` module, from
    the parameters of its chunk functions): a gradient that is a partial sum
    (`mega.grad_partial`) is all-reduced over those axes — with `zero=1`, reduce-scattered over
    dp on dim 0 instead, so AdamW updates (and the moments hold) a 1/dp shard and the updated
    shard is all-gathered. `zero=2` (ZeRO-2) also shards the accumulator: each training
    function reduce-scatters the micro-batch gradient over dp and adds it into the dp shard,
    so @apply_gradients has no dp reduction for it. `zero=3` (ZeRO-3, FSDP) also stores the
    parameter as its dp shard (`mega.dim_axes` gains dp on the first dim dp divides, not only
    dim 0; docs/training-step.md): every function all-gathers it
    right before its first use, and again (`mega.regather`) before its first backward use where
    the function runs both; AdamW updates the shard, with no all-gather after. Under zero 2/3 a
    stage where no parameter shards is an error. A parameter used on several pipeline stages
    (`mega.shared_stages`) has its gradient summed between them (send/recv along pp); the global norm sums each
    shard's squares over the axes it is split over, and over pp, counting every element once.

    Buckets (docs/training-step.md): gradients all-reduced over the same axes are flattened,
    concatenated in parameter order into buckets of at most `bucket-size` elements (a larger
    tensor is a bucket of its own), reduced by one `all_reduce` per bucket and sliced back.
    Under `zero=1` the dp-sharded gradients of one element type are bucketed the same way:
    each is reshaped to `[dp, n/dp]` and the members concatenated along dim 1, so one
    `reduce_scatter` over dp per bucket hands rank r every member's r-th shard; the updated
    shards go back the same way (concatenated, one `all_gather` per bucket, columns sliced
    back). `bucket-size=0` is Megatron's default, max(40000000, 1000000 x dp).

    ```mlir
    func.func @apply_gradients(%w: tensor<4x4xf32> {mega.param = "w"},
        %g: tensor<4x4xf32> {mega.state = "grad.w"}, %m: tensor<4x4xf32> {mega.state = "adam.m.w"},
        %v: tensor<4x4xf32> {mega.state = "adam.v.w"},
        %lr: tensor<f32> {mega.input = "lr"}, %step: tensor<i64> {mega.input = "step"})
        -> (tensor<4x4xf32> {mega.updates = "w"}, tensor<4x4xf32> {mega.updates = "adam.m.w"},
            tensor<4x4xf32> {mega.updates = "adam.v.w"}, tensor<f32> {mega.output = "grad_norm"}) {
      %n = mega.global_norm %g : (tensor<4x4xf32>) -> tensor<f32>
      %p2, %m2, %v2 = mega.adamw_update %w, %g, %m, %v, %lr, %step {beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01} : ...
      return %p2, %m2, %v2, %n : ...
    }
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
  let options = [
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW's first-moment decay">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW's second-moment decay">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW's denominator epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.01",
           "decoupled weight decay of parameters of rank >= 2">,
    Option<"clipGrad", "clip-grad", "double", /*default=*/"0.0",
           "clip the global gradient norm to this value (0: no clipping)">,
    Option<"zero", "zero", "int64_t", /*default=*/"0",
           "ZeRO stage over dp, 0..3: 1 shards the optimizer step (Megatron's distributed "
           "optimizer), 2 also the gradient accumulators (reduce-scattered every micro-batch), "
           "3 also the parameters (all-gathered before use)">,
    Option<"bucketSize", "bucket-size", "int64_t", /*default=*/"0",
           "elements per gradient/parameter bucket of the dp collectives (0: Megatron's "
           "max(40000000, 1000000 x dp))">,
    Option<"reshardAfterForward", "reshard-after-forward", "bool", /*default=*/"true",
           "zero 3: all-gather each parameter again before its backward use (true: the "
           "forward's copy dies after the forward) or keep the forward's copy (false)">,
  ];
}

def TrainingGemmFusion : Pass<"mega-training-gemm-fusion", "mlir::ModuleOp"> {
  let summary = "GEMMs read transposes as flags and accumulate weight gradients in place";
  let description = [{
    Runs last in the training phase, on every function of the (per-rank) training step:

    - Layout assignment: a `mega.transpose` of the last two dims feeding a `mega.matmul`
      becomes the matmul's `transpose_lhs` / `transpose_rhs` flag (BLAS's and cuBLASLt's trans
      flags; a transpose of a transpose toggles back); `linear(x, transpose(w, [1, 0]))` without
      a bias becomes `matmul(x, w)`. A transpose left without users is erased; one with other
      users stays for them.
    - Gradient-accumulation fusion: a `mega.updates = "grad.<p>"` result that is
      `add(acc, matmul(a, b))`, `acc` the argument with `mega.state = "grad.<p>"`, becomes
      `matmul(a, b) accumulate acc` (beta = 1; codegen writes it into the accumulator in place).
      A tied weight's `add(acc, add(rest, matmul(a, b)))` becomes
      `matmul(a, b) accumulate add(acc, rest)`. Under bf16/fp16 the weight gradient is a half
      GEMM cast up to the f32 accumulator: `add(acc, cast(matmul(a, b)))` becomes
      `matmul(a, b) accumulate acc` with half operands and an f32 result (the product summed in
      f32 and never rounded to half: cuBLASLt's bf16/f16 A, B with f32 C, D; the CPU's f32 GEMM
      on the widened operands), a tied weight's `add(acc, cast(add(rest, matmul(a, b))))`
      `matmul(a, b) accumulate add(acc, cast(rest))`. A MoE expert weight gradient
      (`moe_matmul_weight_grad`) fuses only in its accumulator's type: under bf16/fp16 its cast
      and add stay.

    Errors: a `grad.<p>` update with no argument holding that state.

    Before:
    ```mlir
    func.func @forward_backward(%g: tensor<8x4xf32> {mega.input = "g"},
        %x: tensor<8x3xf32> {mega.input = "x"},
        %acc: tensor<4x3xf32> {mega.state = "grad.w"})
        -> (tensor<4x3xf32> {mega.updates = "grad.w"}) {
      %gt = mega.transpose %g [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
      %dw = mega.matmul %gt, %x : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
      %new = mega.add %acc, %dw : tensor<4x3xf32>
      return %new : tensor<4x3xf32>
    }
    ```
    After:
    ```mlir
    func.func @forward_backward(...) -> (tensor<4x3xf32> {mega.updates = "grad.w"}) {
      %new = mega.matmul %g, %x accumulate %acc {transpose_lhs = true}
          : tensor<8x4xf32>, tensor<8x3xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
      return %new : tensor<4x3xf32>
    }
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
}

def TrainingMultiTensorOptimizer : Pass<"mega-training-multi-tensor-optimizer", "mlir::ModuleOp"> {
  let summary = "group @apply_gradients' per-parameter AdamW updates into multi-tensor ops";
  let description = [{
    Runs right after mega-training-optimizer, on every `@apply_gradients` of the module (each
    pipeline stage's too). Its `mega.adamw_update` ops that share the parameter and gradient
    element types, `lr`, `step`, `beta1`, `beta2` and `eps` become one
    `mega.adamw_update_multi` (each parameter keeps its own weight decay), placed at the last of
    them: one optimizer instruction per dtype instead of one per tensor (apex's and Transformer
    Engine's multi-tensor Adam). The arithmetic per element is adamw_update's, so results are
    the same bits; every result still goes into its own parameter's or moment's buffer, so the
    optimizer state and checkpoints are unchanged. ZeRO-1's sharded updates (of a
    `mega.shard_slice` of the parameter) group the same way. An update whose result is read
    before the group's last member stays on its own; a group of one stays `adamw_update`.
    The global norm is already one `mega.global_norm` over all gradients on one device.

    Before:
    ```mlir
    %w2, %mw2, %vw2 = mega.adamw_update %w, %gw, %mw, %vw, %lr, %step
        {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1} : ...
    %b2, %mb2, %vb2 = mega.adamw_update %b, %gb, %mb, %vb, %lr, %step
        {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.0} : ...
    ```
    After:
    ```mlir
    %r:6 = mega.adamw_update_multi %lr, %step, %w, %gw, %mw, %vw, %b, %gb, %mb, %vb
        {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decays = array<f64: 0.1, 0.0>} : ...
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
}

def TrainingDeferParameterGather
    : Pass<"mega-training-defer-parameter-gather", "mlir::ModuleOp"> {
  let summary = "ZeRO-1/2's parameter all-gathers move into the next step's forward";
  let description = [{
    Runs after mega-training-fuse-last-micro-batch and before mega-schedule-latency-hiding,
    only with `--overlap on` (Megatron's `--overlap-param-gather`). In
    `@forward_backward_apply`, each `mega.all_gather` whose result reaches only results that
    update a parameter or a state, through pure data movement (ZeRO-1/2's gather of a bucket's
    updated shards and its unpacking), is deferred: its input, the packed shard, becomes the
    update of a new state `zero.gather.<k>` (an argument and a result of the function), and the
    gather, its unpacking and those results go. Three functions are added:

    - `@gather_parameters`: every pending shard gathered into its parameters, alone;
    - `@gather_forward_backward` and `@gather_forward_backward_apply`: copies of
      `@forward_backward` and of the edited `@forward_backward_apply` that first gather each
      bucket, its gather and unpacking placed just before the first op reading one of its
      parameters (so the latency-hiding pass starts every gather at the top, in the order the
      forward needs them, and completes each where its first layer runs), every read of a
      gathered parameter reading the gathered value, which the function returns as the
      parameter's update. Their outputs are renamed `gathered.<name>`.

    The runtime runs the `gather_` copy for the first micro-batch of a step that follows a
    deferred update, and `@gather_parameters` before anything else reads the parameters (an
    evaluation, a save, an export): between steps, a rank's parameters hold its own shards'
    updates only in the pending states (docs/training-step.md "Overlap"). The pending states
    are not checkpointed. Arithmetic does not change: the same gathered bits reach the
    parameters, one step later in the program.

    Unchanged: a module without `@forward_backward_apply` or whose gathers feed anything else.
    Errors: an existing function of one of the three names.
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
}

def TrainingFuseLastMicroBatch : Pass<"mega-training-fuse-last-micro-batch", "mlir::ModuleOp"> {
  let summary = "add @forward_backward_apply: the last micro-batch's step and the update in one";
  let description = [{
    Runs after the optimizer passes and GEMM fusion and before mega-schedule-latency-hiding,
    only with `--overlap on` and one pipeline stage. Adds

    ```
    @forward_backward_apply = @forward_backward's body, then @apply_gradients' body
    ```

    Arguments: @forward_backward's, then those of @apply_gradients bound to another name
    (Adam moments, `lr`, `step`); parameters and inputs of the same name are one argument. Each
    gradient accumulator `grad.<p>` that @apply_gradients reads is @forward_backward's update
    of it, so the step's gradient (written in place into the accumulator) feeds the dp
    reduction directly. Results: @forward_backward's, then @apply_gradients'; every
    `mega.updates` stays (accumulators, parameters, moments) and each `mega.output` is renamed
    `last.<name>` (`last.loss`, `last.grad_norm`, `last.moe.load`: output names are unique in a
    module). The runtime runs @forward_backward for micro-batches 1..m-1 and this function for
    the last (docs/training-step.md "Overlap").

    The reshapes and concatenations that pack a bucket for a dp `all_reduce` or
    `reduce_scatter` move to just after the last op their operands need: a bucket is packed as
    soon as its last gradient is final, so the latency-hiding pass starts its reduction there,
    while the rest of the backward runs. No arithmetic moves or changes: results are the
    separate functions' bits.

    Unchanged: a module without `@forward_backward` and `@apply_gradients` (pipeline stages),
    one with `@check_gradients` (fp16: the overflow check runs before the update) and one whose
    `@apply_gradients` has no collective (one rank: nothing to overlap).

    Errors: an existing `@forward_backward_apply`; an argument of `@apply_gradients` without a
    name; an accumulator `@forward_backward` does not update with that type; a name of both
    functions with two types.

    Before (dp 2, one bucket of two gradients):
    ```mlir
    func.func @forward_backward(%w: ..., %u: ..., %x: ..., %gw: ... {mega.state = "grad.w"},
        %gu: ... {mega.state = "grad.u"}) -> (loss, gw', gu')
    func.func @apply_gradients(%w, %u, %gw, %gu, moments..., %lr, %step)
        -> (w', u', moments'..., grad_norm)
    ```
    After, in addition:
    ```mlir
    func.func @forward_backward_apply(%w, %u, %x, %gw, %gu, moments..., %lr, %step)
        -> (loss {mega.output = "last.loss"}, gw', gu', w', u', moments'...,
            grad_norm {mega.output = "last.grad_norm"}) {
      ... backward: %gu2 final ...
      %fu = mega.reshape %gu2          // packed here, not after the backward
      ... backward: %gw2 final ...
      %fw = mega.reshape %gw2
      %b = mega.concat %fw, %fu
      %r = mega.all_reduce sum %b ...  // latency hiding: a start here, the done at its reader
      ...
    }
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
}

def TrainingZeroPrefetch : Pass<"mega-training-zero-prefetch", "mlir::ModuleOp"> {
  let summary = "start ZeRO-3's parameter all-gathers one layer ahead, not all at once";
  let description = [{
    Runs after mega-schedule-latency-hiding under `--zero 3 --overlap on`. Latency hiding raises
    every start to just after its input's definition; a ZeRO-3 gather's input is a function
    argument (the parameter's dp shard), so every gather of the step would start at the top of
    the function and every layer's whole parameters would be live at once, undoing ZeRO-3 and
    reshard-after-forward. This pass moves them back: a function's ZeRO-3 gathers (an
    `all_gather_start` over dp of a parameter argument whose `mega.dim_axes` name dp), in the
    order of their `collective_done`s, are grouped into units of one layer (the parameter name
    up to its first dot: `h3.attn.q.weight` is in `h3`); each unit's starts move down to just
    before the previous unit's first done. Layer l+1's gathers then run during layer l's
    compute (FSDP's forward and backward prefetch of one unit), and at any point at most two
    units' gathered parameters are live or in flight: the one in use and the next. A start
    already later than that stays. No op other than starts moves, so every done still follows
    its start and precedes its uses.

    Before (after latency hiding):
    ```mlir
    %a = mega.all_gather_start %h0w ...   // every gather at the top
    %b = mega.all_gather_start %h1w ...
    %c = mega.all_gather_start %h2w ...
    %wa = mega.collective_done %a ...
    ... layer h0 ...
    %wb = mega.collective_done %b ...
    ... layer h1 ...
    %wc = mega.collective_done %c ...
    ```
    After:
    ```mlir
    %a = mega.all_gather_start %h0w ...
    %b = mega.all_gather_start %h1w ...   // before h0's first done: overlaps layer h0
    %wa = mega.collective_done %a ...
    ... layer h0 ...
    %c = mega.all_gather_start %h2w ...   // before h1's first done: overlaps layer h1
    %wb = mega.collective_done %b ...
    ... layer h1 ...
    %wc = mega.collective_done %c ...
    ```
  }];
  let dependentDialects = ["mega::MegaDialect", "mlir::func::FuncDialect"];
}

#endif // MEGA_TRAINING_PASSES_TD
