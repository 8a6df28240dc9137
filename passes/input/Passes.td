// Passes of the input phase: what runs on imported (ONNX) or DSL-built IR before training.
#ifndef MEGA_INPUT_PASSES_TD
#define MEGA_INPUT_PASSES_TD

include "mlir/Pass/PassBase.td"

def InputRaise : Pass<"mega-input-raise", "mlir::ModuleOp"> {
  let summary = "raise decomposed ONNX patterns into the coarse mega ops parallelism needs";
  let description = [{
    An ONNX export spells a transformer in low-level ops. Partitioning works on the coarse
    ops, so this pass raises:

    - LayerNorm: `reduce mean`, `sub`, `pow 2` (or `mul` by itself), `reduce mean`, `add eps`,
      `sqrt`, `div`, then `mul` by a weight and `add` of a bias (both optional) over the last
      dim -> `mega.layer_norm` (a missing weight becomes a constant of ones).
    - RMSNorm (T5): `x * (1 / sqrt(mean(x^2) + eps))` over the last dim, then `mul` by a
      weight (optional) -> `mega.rms_norm`.
    - GELU: `x * 0.5 * (1 + erf(x / sqrt(2)))` -> `mega.gelu none`, and
      `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))` -> `mega.gelu tanh`, with the
      factors in any order.
    - Linear: `matmul(x, W)` plus an optional `add` of a bias `[out]`, where `W` is a
      parameter stored `[in, out]` (a constant-folded export: raised to
      `linear(x, transpose(W))`, the parameter kept as it is) or `transpose(W)` of a
      parameter `[out, in]` (-> `linear(x, W)`).
    - Embedding: `gather` on axis 0 of a rank-2 parameter with integer ids -> `mega.embedding`.
    - Attention: `matmul(q, k^T)`, scaling by constants (`mul`/`div`), an optional mask (an
      `add`, or a `where` against a constant fill of -1e4 or less), `softmax` over the last dim
      and `matmul(., v)`, on `[b, h, s, d]` operands -> `mega.attention` over `[b, s, h, d]`
      (the head transposes around it cancel). A `where` whose keep-mask is the
      lower-triangular causal mask becomes the `causal` flag; any other mask becomes the
      additive `mask` operand.
    - SiLU: `x * sigmoid(x)` (either order) -> `mega.silu`; SwiGLU's gate product stays a
      `mul`.
    - Rotary embeddings: `x * cos + concat(-x[..., d/2:], x[..., :d/2]) * sin` (Hugging Face's
      rotate_half, through slice/neg/concat, with broadcast tables) -> `mega.rope`.
    - Grouped-query attention: when `mega.attention`'s key and value are transposes of
      Hugging Face's repeat_kv (`[b, hk, t, d]` reshaped to `[b, hk, 1, t, d]`, broadcast to
      `[b, hk, h/hk, t, d]`, reshaped to `[b, h, t, d]`), attention takes the `hk` heads
      directly (query head i reads key/value head i / (h/hk), the same pairing).
    - Trivial ops: a broadcast, reshape or transpose that changes nothing; chains of
      reshapes, transposes or broadcasts collapse into one.

    Before:
    ```mlir
    %mm = mega.matmul %x, %wt : tensor<2x8x64xf32>, tensor<64x256xf32> -> tensor<2x8x256xf32>
    %bb = mega.broadcast %b : tensor<256xf32> -> tensor<2x8x256xf32>
    %y = mega.add %mm, %bb : tensor<2x8x256xf32>
    ```
    After (with `%wt` a parameter stored [in, out]):
    ```mlir
    %w = mega.transpose %wt [1, 0] : tensor<64x256xf32> -> tensor<256x64xf32>
    %y = mega.linear %x, %w, %b : (tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<2x8x256xf32>
    ```

    Each family can be switched off, to test one alone or to keep an op low-level; for
    example `--mega-input-raise="attention=false"` leaves the attention chain as it is:
    ```mlir
    // attention=true (default):
    %o = mega.attention %q, %k, %v causal : (...) -> tensor<2x8x4x16xf32>
    // attention=false: matmul, mul, where, softmax, matmul and the transposes stay.
    ```
    The pass reports no errors: a pattern that does not match leaves the IR unchanged.
  }];
  let dependentDialects = ["mega::MegaDialect"];
  let options = [
    Option<"layerNorm", "layer-norm", "bool", /*default=*/"true",
           "raise decomposed LayerNorm into mega.layer_norm">,
    Option<"rmsNorm", "rms-norm", "bool", /*default=*/"true",
           "raise decomposed RMSNorm into mega.rms_norm">,
    Option<"gelu", "gelu", "bool", /*default=*/"true",
           "raise erf and tanh GELU formulas into mega.gelu">,
    Option<"linear", "linear", "bool", /*default=*/"true",
           "raise matmul (+ bias) on a parameter into mega.linear">,
    Option<"embedding", "embedding", "bool", /*default=*/"true",
           "raise gather on a parameter table into mega.embedding">,
    Option<"attention", "attention", "bool", /*default=*/"true",
           "raise matmul/softmax/matmul chains into mega.attention">,
    Option<"silu", "silu", "bool", /*default=*/"true",
           "raise x * sigmoid(x) into mega.silu">,
    Option<"rope", "rope", "bool", /*default=*/"true",
           "raise rotate_half rotary embeddings into mega.rope">,
    Option<"gqa", "gqa", "bool", /*default=*/"true",
           "feed attention the un-repeated key/value heads (grouped-query attention)">,
  ];
}

def SplitFusedProjections : Pass<"mega-split-fused-projections", "mlir::ModuleOp"> {
  let summary = "split a fused projection (q | k | v) into one linear per part";
  let description = [{
    A linear whose output columns are cut, by slices on the last dim (possibly after a reshape
    that keeps it), into n >= 2 equal consecutive parts -- GPT-2's `c_attn` [3, heads, d], any
    fused q/k/v or gate/up projection -- becomes n linears, each reading part i of the same
    weight and bias. The parameters gain the part dim: a weight [n·p, in] becomes [n, p, in], a
    Conv1D weight [in, n·p] (transposed at its use) [in, n, p], a bias [n·p] becomes [n, p]; the
    elements and their order are unchanged, and `mega.source_shape` records the shape the
    model's files hold (weights are reshaped on load, `megac export` writes that shape back).

    Why: tensor parallelism splits a column-parallel weight on its output dim in contiguous
    blocks, which for a fused dim cuts across q, k and v and needs the output re-gathered before
    the slices. With the part dim, each part splits by heads like an ordinary column-parallel
    linear (the blocked layout Megatron gives its fused QKV), with no all-gather.

    Only weights and biases used by nothing else are rewritten; a projection cut unevenly
    (Falcon's multi-query [heads + 2, d]) is left as it is.
  }];
  let dependentDialects = ["mega::MegaDialect"];
}

#endif // MEGA_INPUT_PASSES_TD
