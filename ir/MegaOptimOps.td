// Multi-tensor optimizer ops of the `mega` dialect (docs/training-step.md, "Multi-tensor
// optimizer"): what mega-training-multi-tensor-optimizer groups the per-tensor updates of
// @apply_gradients into.
#ifndef MEGA_OPTIM_OPS_TD
#define MEGA_OPTIM_OPS_TD

def Mega_AdamWUpdateMultiOp : Mega_CostedOp<"adamw_update_multi", [Mega_Plan<"AdamWMulti">, Pure,
    AttrSizedOperandSegments], ["getFlops"]> {
  let summary = "AdamW steps of many parameters in one op (apex's multi-tensor Adam)";
  let description = [{
    `mega.adamw_update` on each (param, grad, exp_avg, exp_avg_sq) of `tensors` (four operands
    per parameter, in that order), with one `lr`, `step`, `beta1`, `beta2` and `eps` and each
    parameter's own entry of `weight_decays`. Results: the new parameter, first and second
    moment of each parameter, in that order (three per parameter). Each parameter's arithmetic
    is adamw_update's, element for element, so the results are the same bits; codegen writes
    each result over its own parameter's or moment's buffer, so grouping moves no data and the
    optimizer state keeps one buffer per parameter.

    With `clip %norm` (a `global_norm` result) and `max_norm`, each gradient is first scaled as
    `clip_by_norm %g, %norm max max_norm` would (the coefficient `min(1, max_norm / (norm +
    1e-6))` in the gradient's type, the product rounded to it), inside the update: clipping
    costs no pass of its own over the gradients, and the results are the same bits as clipping
    first.

    ```mlir
    %p0, %m0, %v0, %p1, %m1, %v1 = mega.adamw_update_multi %lr, %step, %w, %gw, %mw, %vw,
        %b, %gb, %mb, %vb {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08,
        weight_decays = array<f64: 0.1, 0.0>}
        : (tensor<f32>, tensor<i64>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>,
           tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
        -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64xf32>,
            tensor<64xf32>, tensor<64xf32>)
    %p, %m, %v = mega.adamw_update_multi %lr, %step, %w, %gw, %mw, %vw clip %norm
        {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, max_norm = 1.0,
        weight_decays = array<f64: 0.1>} : (...) -> (...)
    ```
  }];
  let arguments = (ins Mega_ScalarFloat:$lr, Mega_ScalarI64:$step,
                       Variadic<Mega_FloatTensor>:$tensors, Optional<Mega_ScalarFloat>:$norm,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       DenseF64ArrayAttr:$weight_decays, OptionalAttr<F64Attr>:$max_norm);
  let results = (outs Variadic<Mega_FloatTensor>:$updated);
  let assemblyFormat = "$lr `,` $step `,` $tensors (`clip` $norm^)? attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Parameters updated (four operands each).
    size_t getNumParams() { return getTensors().size() / 4; }
    ::mlir::Value getParam(size_t k) { return getTensors()[4 * k]; }
    ::mlir::Value getGrad(size_t k) { return getTensors()[4 * k + 1]; }
    ::mlir::Value getExpAvg(size_t k) { return getTensors()[4 * k + 2]; }
    ::mlir::Value getExpAvgSq(size_t k) { return getTensors()[4 * k + 3]; }
    ::mlir::Value getNewParam(size_t k) { return getUpdated()[3 * k]; }
    ::mlir::Value getNewExpAvg(size_t k) { return getUpdated()[3 * k + 1]; }
    ::mlir::Value getNewExpAvgSq(size_t k) { return getUpdated()[3 * k + 2]; }
  }];
}

#endif // MEGA_OPTIM_OPS_TD
