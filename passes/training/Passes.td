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
    model's only floating-point result); its other results are dropped from the copy. Both
    loss kinds, `causal` (labels are the inputs shifted by one) and `mlm` (labels are the
    masked tokens, `ignore_index` elsewhere), are this cross-entropy; the data side builds the
    labels, and the kind is recorded as `mega.loss_kind` on @forward_backward.

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
           "causal (next-token) or mlm (masked tokens); both are cross-entropy over the labels">,
  ];
}

def TrainingAutodiff : Pass<"mega-training-autodiff", "mlir::ModuleOp"> {
  let summary = "append the backward pass and gradient accumulation to @forward_backward";
  let description = [{
    A generic reverse walk over the function (default `@forward_backward`) from its scalar
    result named `loss`: d(loss) = 1, and every op between a parameter (`mega.param`
    argument) and the loss builds its operands' gradients from its results' through its
    `mega::GradientOpInterface` (ir/GradientRules.cpp); a value used several times gets the sum
    of its uses' gradients. Only floating-point values carry gradients, so integer ids, masks
    and comparisons end the walk. For every parameter `<p>` the function gains a state argument
    (`mega.state = "grad.<p>"`, the parameter's type) and a result `acc + d(loss)/d(p)`
    (`mega.updates = "grad.<p>"`); a parameter the loss does not depend on gets `acc`
    unchanged. Ops left dead (the unused half of a rule, forward results nobody reads) are
    removed.

    Errors: a function or loss result that is missing or not a 0-d float, no parameters, a
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
    others (biases, norm weights). `lr` is a 0-d tensor of the parameters' float type (f64 when
    every parameter is f64, else f32), `step` a 0-d i64 tensor (1-based). Parameters keep their
    `mega.param`/`mega.init` attributes: a name is the same storage in every function.

    Errors: hyperparameters out of range, no `@forward_backward`, one without parameters or
    with a parameter that is not a float tensor or has no accumulator (run
    mega-training-autodiff first), an existing `@apply_gradients`.

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
  ];
}

#endif // MEGA_TRAINING_PASSES_TD
