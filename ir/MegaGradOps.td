// Backward ops of the `mega` dialect: what gradient rules build that no forward op expresses.
// Each recomputes what it needs from the forward inputs (statistics, probabilities) instead of
// saving it, so recompute policies stay a matter of which values the step keeps.
#ifndef MEGA_GRAD_OPS_TD
#define MEGA_GRAD_OPS_TD

def Mega_PadOp : Mega_CostedOp<"pad", [Mega_Plan<"Pad">, Pure, Mega_InferShape], ["getFlops"]> {
  let summary = "pad with zeros (the gradient of slice)";
  let description = [{
    Per dim, `low` zeros before, `high` zeros after and `interior` zeros between neighbouring
    elements: result size `low + high + size + (size - 1) * interior`. All amounts are >= 0.

    ```mlir
    %p = mega.pad %x low [0, 1] high [0, 2] interior [0, 0] : tensor<4x8xf32> -> tensor<4x11xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input, DenseI64ArrayAttr:$low, DenseI64ArrayAttr:$high,
                       DenseI64ArrayAttr:$interior);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input `low` $low `high` $high `interior` $interior attr-dict `:` "
                       "type($input) `->` type($result)";
}

def Mega_LayerNormGradOp : Mega_CostedOp<"layer_norm_grad", [Mega_Plan<"LayerNormGrad">, Pure],
    ["getFlops"]> {
  let summary = "gradients of layer_norm";
  let description = [{
    For `y = layer_norm(x, weight, bias, eps)` and the incoming gradient `dy` (x's type):
    `dx`, `dweight = sum(dy * xhat)` and `dbias = sum(dy)` over all but the last dim (bias
    gradient is produced whether or not the forward had a bias). Statistics are recomputed from
    `x` in at least fp32.

    ```mlir
    %dx, %dw, %db = mega.layer_norm_grad %dy, %x, %w eps 1.0e-05 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$result_grad, Mega_FloatTensor:$input,
                       Mega_FloatTensor:$weight, DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Mega_FloatTensor:$input_grad, Mega_FloatTensor:$weight_grad,
                      Mega_FloatTensor:$bias_grad);
  let assemblyFormat = "$result_grad `,` $input `,` $weight `eps` $epsilon attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_RmsNormGradOp : Mega_CostedOp<"rms_norm_grad", [Mega_Plan<"RmsNormGrad">, Pure],
    ["getFlops"]> {
  let summary = "gradients of rms_norm";
  let description = [{
    For `y = rms_norm(x, weight, eps)` and `dy`: `dx` and `dweight = sum(dy * x / rms)` over all
    but the last dim.

    ```mlir
    %dx, %dw = mega.rms_norm_grad %dy, %x, %w eps 1.0e-06 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$result_grad, Mega_FloatTensor:$input,
                       Mega_FloatTensor:$weight, DefaultValuedAttr<F64Attr, "1.0e-6">:$epsilon);
  let results = (outs Mega_FloatTensor:$input_grad, Mega_FloatTensor:$weight_grad);
  let assemblyFormat = "$result_grad `,` $input `,` $weight `eps` $epsilon attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_AttentionGradOp : Mega_CostedOp<"attention_grad", [Mega_Plan<"AttentionGrad">, Pure,
    AttrSizedOperandSegments], ["getFlops", "getMatmulFlops"]> {
  let summary = "gradients of attention";
  let description = [{
    For `o = attention(q, k, v, mask, causal, scale)` and `do` (o's type): `dq`, `dk`, `dv`
    (with grouped-query attention, dk and dv sum over the query heads sharing a key/value head)
    and, when the forward had a mask, `dmask`: the gradient of the additive mask, summed over
    the dims the mask broadcast along (a learned relative position bias trains through it).
    With `positions` (causal by global positions, as the forward's) there is a `dmask` only when
    the forward also had a mask (padded inputs). Probabilities are recomputed from q and k.

    ```mlir
    %dq, %dk, %dv = mega.attention_grad %do, %q, %k, %v causal : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$result_grad, Mega_FloatTensor:$query,
                       Mega_FloatTensor:$key, Mega_FloatTensor:$value,
                       Optional<Mega_FloatTensor>:$mask,
                       Optional<Mega_IntTensor>:$query_positions,
                       Optional<Mega_IntTensor>:$key_positions, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs Mega_FloatTensor:$query_grad, Mega_FloatTensor:$key_grad,
                      Mega_FloatTensor:$value_grad, Optional<Mega_FloatTensor>:$mask_grad);
  let assemblyFormat = "$result_grad `,` $query `,` $key `,` $value (`mask` $mask^)? "
                       "(`positions` $query_positions^ `,` $key_positions)? "
                       "(`causal` $causal^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_GeluGradOp : Mega_CostedOp<"gelu_grad", [Mega_Elementwise, Mega_Plan<"GeluGrad">, Pure,
    SameOperandsAndResultType], ["getFlops"]> {
  let summary = "gradient of gelu";
  let description = [{
    `dx = dy * gelu'(x)` for the same approximation as the forward.

    ```mlir
    %dx = mega.gelu_grad none %dy, %x : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Mega_GeluApproximation:$approximation, Mega_FloatTensor:$result_grad,
                       Mega_FloatTensor:$input);
  let results = (outs Mega_FloatTensor:$input_grad);
  let assemblyFormat = "$approximation $result_grad `,` $input attr-dict `:` type($input_grad)";
}

def Mega_SoftmaxGradOp : Mega_CostedOp<"softmax_grad", [Mega_Plan<"SoftmaxGrad">, Pure,
    SameOperandsAndResultType], ["getFlops"]> {
  let summary = "gradient of softmax, from its output";
  let description = [{
    For `y = softmax(x, axis)`: `dx = y * (dy - sum(dy * y, axis))`.

    ```mlir
    %dx = mega.softmax_grad %dy, %y axis 3 : tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$result_grad, Mega_FloatTensor:$result, I64Attr:$axis);
  let results = (outs Mega_FloatTensor:$input_grad);
  let assemblyFormat = "$result_grad `,` $result `axis` $axis attr-dict `:` type($input_grad)";
  let hasVerifier = 1;
}

def Mega_CrossEntropyGradOp : Mega_CostedOp<"cross_entropy_grad", [Mega_Plan<"CrossEntropyGrad">,
    Pure], ["getFlops"]> {
  let summary = "gradient of cross_entropy with respect to the logits";
  let description = [{
    For per-token losses `l = cross_entropy(logits, labels)` and their gradient `dl [...]`:
    `dlogits = dl * (softmax(logits) - onehot(labels))`, zero on ignored tokens.

    ```mlir
    %dz = mega.cross_entropy_grad %dl, %logits, %labels : (tensor<2x8xf32>, tensor<2x8x128xf32>, tensor<2x8xi64>) -> tensor<2x8x128xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$loss_grad, Mega_FloatTensor:$logits,
                       Mega_IntTensor:$labels, OptionalAttr<I64Attr>:$ignore_index,
                       OptionalAttr<StrArrayAttr>:$vocab_axes);
  let results = (outs Mega_FloatTensor:$logits_grad);
  let assemblyFormat = "$loss_grad `,` $logits `,` $labels attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_EmbeddingGradOp : Mega_CostedOp<"embedding_grad", [Mega_Plan<"EmbeddingGrad">, Pure],
    ["getFlops"]> {
  let summary = "gradient of embedding: scatter-add rows into the table's shape";
  let description = [{
    `dtable[ids[i], :] += dy[i, :]` over every position i, in a fixed order (deterministic);
    the result shape `[V, h]` gives the vocabulary size. Also the gradient of `gather` along
    axis 0.

    ```mlir
    %dt = mega.embedding_grad %dy[%ids] : tensor<2x8x64xf32>, tensor<2x8xi64> -> tensor<128x64xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$result_grad, Mega_IntTensor:$ids,
                       OptionalAttr<StrArrayAttr>:$vocab_axes);
  let results = (outs Mega_FloatTensor:$table_grad);
  let assemblyFormat = "$result_grad `[` $ids `]` attr-dict `:` type($result_grad) `,` "
                       "type($ids) `->` type($table_grad)";
  let hasVerifier = 1;
}

#endif // MEGA_GRAD_OPS_TD
