// mega-training-optimizer under ZeRO-2 and ZeRO-3 (docs/training-step.md, "ZeRO-2 and ZeRO-3"):
// a one-layer GPT at dp 2 (the model of optimizer-buckets.mlir, inline below). Every parameter's
// dim 0 is even, so all shard; h0.mlp.fc.weight is [32, 8] and its dp shard [16, 8].
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=2" --mega-training-gemm-fusion | FileCheck %s --check-prefix=Z2
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=3" --canonicalize --cse | FileCheck %s --check-prefix=Z3
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2 sequence-parallel=true" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=2" | FileCheck %s --check-prefix=SP
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=3 reshard-after-forward=false" --canonicalize --cse | FileCheck %s --check-prefix=KEEP
// RUN: megac-opt %s --mega-training-loss --mega-training-precision="precision=bf16" --mega-sharding-propagation="dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=3" --canonicalize --cse | FileCheck %s --check-prefix=Z3H

// ZeRO-2: the accumulator is the dp shard; the micro-batch's weight gradient (a GEMM) is
// reduce-scattered over dp right after it is computed and added into the shard. GEMM fusion
// must not fold that add into the GEMM (the GEMM's product is not what is added).
// Z2-LABEL: func.func @forward_backward(
// Z2-SAME: tensor<16x8xf32> {mega.dim_axes = {{\[\["dp"\], \[\]\]}}, mega.global_shape = array<i64: 32, 8>, mega.state = "grad.h0.mlp.fc.weight"}
// Z2-SAME: -> (tensor<f32> {mega.output = "loss"}
// Z2-SAME: tensor<16x8xf32> {mega.updates = "grad.h0.mlp.fc.weight"}
// Z2: %[[P:.*]] = mega.matmul %{{.*}}, %{{.*}} {transpose_lhs = true} : tensor<8x32xf32>, tensor<8x8xf32> -> tensor<32x8xf32>
// Z2-NEXT: %[[S:.*]] = mega.reduce_scatter sum %[[P]] on #mesh axes ["dp"] dim 0 : tensor<32x8xf32> -> tensor<16x8xf32>
// Z2-NEXT: %{{.*}} = mega.add %arg{{[0-9]+}}, %[[S]] : tensor<16x8xf32>
// Z2-NOT: accumulate
// Z2-LABEL: func.func @apply_gradients(
// Z2-SAME: %arg{{[0-9]+}}: tensor<32x8xf32> {{{.*}}mega.param = "h0.mlp.fc.weight"}
// Z2-SAME: tensor<16x8xf32> {mega.dim_axes = {{\[\["dp"\], \[\]\]}}, mega.global_shape = array<i64: 32, 8>, mega.state = "grad.h0.mlp.fc.weight"}
// Z2-NOT: mega.reduce_scatter
// Z2: mega.shard_slice
// Z2-NOT: mega.reduce_scatter
// Z2: mega.all_gather %{{.*}} on #mesh axes ["dp"] dim 0
// Z2-NOT: mega.reduce_scatter
// Z2: return

// ZeRO-3: the parameter is stored as its dp shard (dim_axes gain dp on dim 0, so the parameter
// table records the shard's offset), all-gathered right before its first forward use and again
// before its first backward use (mega.regather survives CSE); @apply_gradients updates the
// shard in place: no shard_slice, no all-gather, no reduce-scatter.
// Z3-LABEL: func.func @forward_backward(
// Z3-SAME: %[[W:arg[0-9]+]]: tensor<16x8xf32> {mega.dim_axes = {{\[\["dp"\], \[\]\]}}, mega.global_shape = array<i64: 32, 8>, mega.grad_partial = ["dp"], mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.mlp.fc.weight"}
// Z3: %[[F:.*]] = mega.all_gather %[[W]] on #mesh axes ["dp"] dim 0 : tensor<16x8xf32> -> tensor<32x8xf32>
// Z3-NEXT: %[[FB:.*]] = mega.all_gather %{{.*}} : tensor<16xf32> -> tensor<32xf32>
// Z3-NEXT: mega.linear %{{.*}}, %[[F]], %[[FB]]
// Z3-NOT: %[[F]]
// Z3: %[[B:.*]] = mega.all_gather %[[W]] on #mesh axes ["dp"] dim 0 {mega.regather} : tensor<16x8xf32> -> tensor<32x8xf32>
// Z3-NEXT: %[[T:.*]] = mega.transpose %[[B]] [1, 0]
// Z3-NEXT: mega.linear %{{.*}}, %[[T]]
// Z3-NOT: %[[F]]
// Z3: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<32x8xf32> -> tensor<16x8xf32>
// Z3-NOT: %[[F]]
// Z3: return
// Z3-LABEL: func.func @apply_gradients(
// Z3-SAME: %[[WA:arg[0-9]+]]: tensor<16x8xf32> {mega.dim_axes = {{\[\["dp"\], \[\]\]}}, mega.global_shape = array<i64: 32, 8>, mega.grad_partial = ["dp"], mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.mlp.fc.weight"}
// Z3-SAME: -> (
// Z3-SAME: tensor<16x8xf32> {mega.updates = "h0.mlp.fc.weight"}
// Z3-NOT: mega.shard_slice
// Z3-NOT: mega.reduce_scatter
// Z3-NOT: mega.all_gather
// Z3: mega.adamw_update %[[WA]],
// Z3-NOT: mega.all_gather
// Z3: return

// ZeRO-3 under bf16 mixed precision: the bf16 copy of the f32 master (mega-training-precision's
// cast, at the function's top) moves with the gather, so each half casts its own gathered copy
// right before using it and the forward's bf16 copy dies after its last forward use (without
// this the cast of every parameter lived from the top to the backward's last use).
// Z3H-LABEL: func.func @forward_backward(
// Z3H: %[[F:.*]] = mega.all_gather %[[W:arg[0-9]+]] on #mesh axes ["dp"] dim 0 : tensor<16x8xf32> -> tensor<32x8xf32>
// Z3H-NEXT: %[[FC:.*]] = mega.cast %[[F]] : tensor<32x8xf32> -> tensor<32x8xbf16>
// Z3H: mega.linear %{{.*}}, %[[FC]], %{{.*}} : (tensor<2x4x8xbf16>, tensor<32x8xbf16>
// Z3H-NOT: %[[FC]]
// Z3H: %[[B:.*]] = mega.all_gather %[[W]] on #mesh axes ["dp"] dim 0 {mega.regather} : tensor<16x8xf32> -> tensor<32x8xf32>
// Z3H-NEXT: %[[BC:.*]] = mega.cast %[[B]] : tensor<32x8xf32> -> tensor<32x8xbf16>
// Z3H-NOT: %[[FC]]
// Z3H: return

// ZeRO-2 with sequence parallelism: a norm weight's gradient is partial over dp and tp; the
// accumulator holds the dp shard (partial over tp only), and @apply_gradients all-reduces it
// over tp on its own.
// ZeRO-3 with reshard-after-forward=false: one all-gather per parameter, read by the forward and
// the backward alike (the whole copy lives from the forward's first use to the backward's last).
// KEEP-LABEL: func.func @forward_backward(
// KEEP: %[[F:.*]] = mega.all_gather %[[W:arg[0-9]+]] on #mesh axes ["dp"] dim 0 : tensor<16x8xf32> -> tensor<32x8xf32>
// KEEP-NOT: mega.regather
// KEEP-NOT: mega.all_gather %[[W]]
// KEEP: %[[T:.*]] = mega.transpose %[[F]] [1, 0]
// KEEP-NOT: mega.regather
// KEEP: return

// SP-LABEL: func.func @forward_backward(
// SP-SAME: tensor<4xf32> {mega.dim_axes = {{\[\["dp"\]\]}}, mega.global_shape = array<i64: 8>, mega.grad_partial = ["tp"], mega.state = "grad.h0.ln1.weight"}
// SP-LABEL: func.func @apply_gradients(
// SP-SAME: %[[G:arg[0-9]+]]: tensor<4xf32> {mega.dim_axes = {{\[\["dp"\]\]}}, mega.global_shape = array<i64: 8>, mega.grad_partial = ["tp"], mega.state = "grad.h0.ln1.weight"}
// SP-NOT: mega.reduce_scatter
// SP: mega.all_reduce sum %[[G]] on #mesh axes ["tp"] : tensor<4xf32>
// SP-NOT: mega.reduce_scatter
// SP: return
module attributes {mega.model = "gpt:layers=1,hidden=8,heads=2,ffn=32,seq=4,vocab=16,batch=4,tied=1,gelu=erf,dtype=f32"} {
  func.func @gpt(%arg0: tensor<4x4xi64> {mega.input = "input_ids"}, %arg1: tensor<16x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wte"}, %arg2: tensor<4x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wpe"}, %arg3: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln1.weight"}, %arg4: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln1.bias"}, %arg5: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.q.weight"}, %arg6: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.q.bias"}, %arg7: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.k.weight"}, %arg8: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.k.bias"}, %arg9: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.v.weight"}, %arg10: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.v.bias"}, %arg11: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.attn.proj.weight"}, %arg12: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.proj.bias"}, %arg13: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln2.weight"}, %arg14: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln2.bias"}, %arg15: tensor<32x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.mlp.fc.weight"}, %arg16: tensor<32xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.fc.bias"}, %arg17: tensor<8x32xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.mlp.proj.weight"}, %arg18: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.proj.bias"}, %arg19: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "ln_f.weight"}, %arg20: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "ln_f.bias"}) -> (tensor<4x4x16xf32> {mega.output = "logits"}) {
    %0 = mega.embedding %arg1[%arg0] : tensor<16x8xf32>, tensor<4x4xi64> -> tensor<4x4x8xf32>
    %1 = mega.broadcast %arg2 : tensor<4x8xf32> -> tensor<4x4x8xf32>
    %2 = mega.add %0, %1 : tensor<4x4x8xf32>
    %3 = mega.layer_norm %2, %arg3, %arg4 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %4 = mega.linear %3, %arg5, %arg6 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %5 = mega.reshape %4 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %6 = mega.linear %3, %arg7, %arg8 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %7 = mega.reshape %6 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %8 = mega.linear %3, %arg9, %arg10 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %9 = mega.reshape %8 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %10 = mega.attention %5, %7, %9 causal : (tensor<4x4x2x4xf32>, tensor<4x4x2x4xf32>, tensor<4x4x2x4xf32>) -> tensor<4x4x2x4xf32>
    %11 = mega.reshape %10 : tensor<4x4x2x4xf32> -> tensor<4x4x8xf32>
    %12 = mega.linear %11, %arg11, %arg12 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %13 = mega.add %2, %12 : tensor<4x4x8xf32>
    %14 = mega.layer_norm %13, %arg13, %arg14 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %15 = mega.linear %14, %arg15, %arg16 : (tensor<4x4x8xf32>, tensor<32x8xf32>, tensor<32xf32>) -> tensor<4x4x32xf32>
    %16 = mega.gelu none %15 : tensor<4x4x32xf32>
    %17 = mega.linear %16, %arg17, %arg18 : (tensor<4x4x32xf32>, tensor<8x32xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %18 = mega.add %13, %17 : tensor<4x4x8xf32>
    %19 = mega.layer_norm %18, %arg19, %arg20 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %20 = mega.linear %19, %arg1 : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    return %20 : tensor<4x4x16xf32>
  }
}
