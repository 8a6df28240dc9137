"""Plan opcode -> the planner's kernel class (planner/KernelModel.h `KernelClass`, by its
kernelClassName): how a CPU trace's instructions (`megac train --trace`, category "kernel") line
up with `megac plan --json`'s `kernel_launches` and `kernel_seconds`. Shared by
tests/e2e/plan_kernels_test.py (counts and GEMM shapes) and bench/cpu_cost_model.py --by-class
(time per class)."""

CLASS = {
    "Linear": "gemm", "MatMul": "gemm", "Attention": "attention", "AttentionGrad": "attention",
    "Transpose": "transpose", "Broadcast": "broadcast", "LayerNorm": "layer_norm",
    "LayerNormGrad": "layer_norm_grad", "Gelu": "gelu", "GeluGrad": "gelu_grad",
    "Reduce": "reduce", "Embedding": "embedding", "EmbeddingGrad": "embedding_grad",
    "CrossEntropy": "cross_entropy", "CrossEntropyGrad": "cross_entropy_grad",
    "AdamW": "adamw", "AdamWMulti": "adamw", "GlobalNorm": "global_norm", "Slice": "copy",
    "Concat": "copy", "ShardSlice": "copy", "Copy": "copy", "Add": "elementwise",
    "Mul": "elementwise", "Sub": "elementwise", "Div": "elementwise", "Sqrt": "elementwise",
    "Neg": "elementwise",
    # Mixed precision's conversions (bf16/fp16 <-> f32: parameters, the norms' and the loss'
    # operands, bias and table gradients; StackProfile::halfCastInstructions).
    "Cast": "cast",
    # An exp per element: priced at the calibrated SiLU rate (planner/BlockKernels.cpp
    # swigluGradUnfused), not at its bytes.
    "Sigmoid": "silu", "RmsNorm": "rms_norm", "RmsNormGrad": "rms_norm_grad",
    "Silu": "silu", "Rope": "rope", "Softmax": "softmax", "SoftmaxGrad": "softmax_grad",
    # MoE (docs/moe.md): the expert matrices over the routed rows, the top-k mask, the dispatch
    # (a copy of each token to its experts' rows), the combine and the gates' row dots.
    "MoeMatmul": "gemm", "MoeMatmulWeightGrad": "gemm", "TopKMask": "elementwise",
    # megac's dispatch writes each token times its gate (StackProfile::dispatchScalesTokens).
    "MoeDispatch": "elementwise", "MoeCombine": "elementwise", "MoeRowDot": "reduce",
}
# Their rows depend on the routing: compared by count (class gemm), not by shape.
ROUTED = {"MoeMatmul", "MoeMatmulWeightGrad"}
