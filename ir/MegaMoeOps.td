// Mixture-of-experts ops of the `mega` dialect (docs/moe.md): the router's top-k, token dispatch
// to experts, the experts' grouped matrix multiplications, the weighted combine, and the
// auxiliary-loss hook. Tokens are any number of leading dims `t...` (flattened in row-major
// order: T tokens); routed tensors are laid out [E, t..., h]: row (e, t) holds token t's copy
// for expert e, zero where t is not routed to e. An entry of the routing weights `w [t..., E]`
// that is non-zero marks (t, e) active: the kernels compute active rows only, so the work
// follows the real per-expert counts (T·k rows in all without dropping) and the layout stays
// the same static shape whatever the routing.
#ifndef MEGA_MOE_OPS_TD
#define MEGA_MOE_OPS_TD

def Mega_TopKMaskOp : Mega_CostedOp<"topk_mask", [Mega_Plan<"TopKMask">, Pure,
    SameOperandsAndResultType, Mega_Differentiable], ["getFlops"]> {
  let summary = "1 at the k largest entries of each row (last dim), 0 elsewhere";
  let description = [{
    A router's choice: for each row of `input [..., E]`, 1.0 at the `k` largest entries and 0.0
    elsewhere. Ties go to the lower index (an entry beats every later one of equal value); NaN
    ranks below every number. The choice is piecewise constant: it has no gradient.

    ```mlir
    %m = mega.topk_mask %p k 2 : tensor<2x8x4xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, I64Attr:$k);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `k` $k attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Mega_MoeDispatchOp : Mega_CostedOp<"moe_dispatch", [Mega_Plan<"MoeDispatch">, Pure,
    Mega_InferShape, Mega_Differentiable], ["getFlops"]> {
  let summary = "copy each token to the experts it is routed to, scaled by its weight";
  let description = [{
    `input [t..., h]`, `weights [t..., E]` -> `[E, t..., h]`: row (e, t) is
    `weights[t, e] * input[t]` where `weights[t, e] != 0`, else 0. With 0/1 routing weights it
    is the token dispatch; `moe_combine` is its adjoint.

    ```mlir
    %x = mega.moe_dispatch %h, %m : (tensor<2x8x64xf32>, tensor<2x8x4xf32>) -> tensor<4x2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$weights);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weights attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_MoeCombineOp : Mega_CostedOp<"moe_combine", [Mega_Plan<"MoeCombine">, Pure,
    Mega_InferShape, Mega_Differentiable], ["getFlops"]> {
  let summary = "sum each token's expert outputs, weighted by its routing weights";
  let description = [{
    `input [E, t..., h]`, `weights [t..., E]` -> `[t..., h]`: token t's row is the sum over the
    experts e with `weights[t, e] != 0`, in expert order, of `weights[t, e] * input[e, t]`.

    ```mlir
    %y = mega.moe_combine %o, %g : (tensor<4x2x8x64xf32>, tensor<2x8x4xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$weights);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weights attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_MoeMatmulOp : Mega_CostedOp<"moe_matmul", [Mega_Plan<"MoeMatmul">, Pure,
    Mega_InferShape, Mega_Differentiable], ["getFlops", "getMatmulFlops"]> {
  let summary = "each expert's linear map on the rows routed to it (grouped GEMM)";
  let description = [{
    `input [E, t..., in]`, `weight [E, out, in]` (each expert's nn.Linear weight; with
    `transpose_weight`, `[E, in, out]`), `weights [t..., E]` -> `[E, t..., out]`: active rows
    (`weights[t, e] != 0`) are `input[e, t] · weight[e]^T` (`· weight[e]`), other rows are 0
    and cost nothing. `topk` is the number of experts each token is routed to, for the cost
    (T·topk active rows without dropping); splitting the expert dim is expert parallelism, and
    a shard records the model's expert count in `global_experts` (its share of the rows is
    E/global_experts of them).

    ```mlir
    %y = mega.moe_matmul %x, %w1, %m topk 2 : (tensor<4x16x64xf32>, tensor<4x128x64xf32>, tensor<16x4xf32>) -> tensor<4x16x128xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$weight,
                       Mega_FloatTensor:$weights, I64Attr:$topk,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_weight,
                       OptionalAttr<I64Attr>:$global_experts);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight `,` $weights `topk` $topk attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_AddAuxLossOp : Mega_CostedOp<"add_aux_loss", [Pure, Mega_Differentiable,
    AllTypesMatch<["input", "result"]>], ["getFlops"]> {
  let summary = "identity on `input`; `aux` joins the objective (gradient seeded like the loss)";
  let description = [{
    Adds the scalar `aux` (a load-balancing loss) to the training objective where it is
    computed, as Megatron's MoEAuxLossAutoScaler does: the forward passes `input` through
    unchanged; the backward passes the gradient of `input` through and seeds `aux` with the
    loss's seed (1, or the loss scale). The term never travels to the loss, so it works the
    same inside any pipeline stage.

    ```mlir
    %p2 = mega.add_aux_loss %p, %aux : tensor<2x8x4xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$aux);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $aux attr-dict `:` type($input) `,` type($aux)";
  let hasVerifier = 1;
}

def Mega_MoeExchangeOp : Mega_CostedOp<"moe_exchange", [Mega_Plan<"MoeAllToAll">, Pure,
    Mega_Differentiable], ["getFlops", "getBytesRead", "getBytesWritten"]> {
  let summary = "expert parallelism's token exchange: the identity, sending only routed rows";
  let description = [{
    Inserted by sharding propagation under expert parallelism (docs/moe.md). Globally the
    identity on a routed tensor `input [E, t..., h]` (zero where a token is not routed);
    what it does is change the layout: with `to_experts`, from the tokens split over `axes`
    (every expert) to the experts split over them (each rank all tokens of its group), and back
    without. After mega-spmdize each rank sends, to each member of the group, only the rows
    that member needs — those active in `token_mask` (this rank's tokens, every expert) and
    `expert_mask` (the group's tokens, this rank's experts), two views of one routing — with a
    variable-split all-to-all (Megatron's all-to-all token dispatcher). Its gradient is the
    exchange the other way.

    ```mlir
    %e = mega.moe_exchange %d, %m, %mg on #mesh axes ["ep"] {to_experts} : (tensor<4x1x4x8xf32>, tensor<1x4x4xf32>, tensor<2x4x2xf32>) -> tensor<2x2x4x8xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$token_mask,
                       Mega_FloatTensor:$expert_mask, Mega_MeshAttr:$mesh, StrArrayAttr:$axes,
                       UnitAttr:$to_experts);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $token_mask `,` $expert_mask `on` $mesh `axes` $axes "
                       "attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

// ---- Backward ops -------------------------------------------------------------------------

def Mega_MoeRowDotOp : Mega_CostedOp<"moe_row_dot", [Mega_Plan<"MoeRowDot">, Pure,
    Mega_InferShape], ["getFlops"]> {
  let summary = "dot products of routed rows with their token's vector (a weights gradient)";
  let description = [{
    `input [E, t..., h]`, `other [t..., h]`, `weights [t..., E]` -> `[t..., E]`: entry (t, e)
    is `dot(input[e, t], other[t])` where `weights[t, e] != 0`, else 0 — the gradient of the
    routing weights of `moe_dispatch` and `moe_combine`.

    ```mlir
    %dg = mega.moe_row_dot %o, %dy, %g : (tensor<4x16x64xf32>, tensor<16x64xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$other,
                       Mega_FloatTensor:$weights);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $other `,` $weights attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_MoeMatmulWeightGradOp : Mega_CostedOp<"moe_matmul_weight_grad",
    [Mega_Plan<"MoeMatmulWeightGrad">, Pure, Mega_InferShape], ["getFlops", "getMatmulFlops"]> {
  let summary = "per-expert sum over active rows of outer products (moe_matmul's weight gradient)";
  let description = [{
    `lhs [E, t..., p]`, `rhs [E, t..., q]`, `weights [t..., E]` -> `[E, p, q]`: expert e's
    matrix is the sum over its active rows t (`weights[t, e] != 0`), in token order, of
    `lhs[e, t]^T rhs[e, t]`. `topk` and `global_experts` as for moe_matmul. With an
    `accumulate` operand (the result's type) the sums are added to it (BLAS's beta = 1): the
    weight gradient accumulates into its gradient accumulator without a separate add
    (mega-training-gemm-fusion).

    ```mlir
    %dw = mega.moe_matmul_weight_grad %dy, %x, %m topk 2 : (tensor<4x16x128xf32>, tensor<4x16x64xf32>, tensor<16x4xf32>) -> tensor<4x128x64xf32>
    %acc2 = mega.moe_matmul_weight_grad %dy, %x, %m topk 2 accumulate %acc : (tensor<4x16x128xf32>, tensor<4x16x64xf32>, tensor<16x4xf32>, tensor<4x128x64xf32>) -> tensor<4x128x64xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$lhs, Mega_FloatTensor:$rhs, Mega_FloatTensor:$weights,
                       Optional<Mega_FloatTensor>:$accumulate,
                       I64Attr:$topk, OptionalAttr<I64Attr>:$global_experts);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs `,` $weights `topk` $topk (`accumulate` $accumulate^)? "
                       "attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // MEGA_MOE_OPS_TD
