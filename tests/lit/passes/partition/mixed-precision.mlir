// Mixed precision (bf16) before partitioning: the f32 master weights are cast to bf16 where they
// are used, and the casts take the layout their users give the weights, so tensor parallelism
// still splits them (and a weight's gradient still accumulates as a dp partial sum through the
// cast, reduced once per step instead of at every use).
// RUN: megac-opt %s --mega-training-loss --mega-training-precision=precision=bf16 --mega-sharding-propagation="tp=2 dp=2" --mega-spmdize | FileCheck %s

// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: tensor<4x8xf32> {mega.dim_axes = {{\[\[}}"tp"], []], mega.global_shape = array<i64: 8, 8>, mega.grad_partial = ["dp"], {{.*}}mega.param = "h0.attn.q.weight"}
// CHECK-SAME: tensor<8x16xf32> {mega.dim_axes = {{\[\[}}], ["tp"]], mega.global_shape = array<i64: 8, 32>, mega.grad_partial = ["dp"], {{.*}}mega.param = "h0.mlp.proj.weight"}
// CHECK: mega.cast %{{.*}} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: mega.linear %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x4x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>) -> tensor<2x4x4xbf16>
// CHECK: mega.all_reduce sum %{{.*}} on #mesh axes ["tp"] : tensor<2x4x8xbf16>
// No weight is all-reduced over dp in the forward half: only the loss.
// CHECK-NOT: copy_to_shards %{{.*}} on #mesh axes ["dp"]

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
