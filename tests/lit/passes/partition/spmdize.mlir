// mega-spmdize after mega-sharding-propagation on a one-layer GPT (megac import --model
// gpt:layers=1,hidden=8,heads=2,seq=4,vocab=16,batch=4, inline below): local shapes, Megatron's
// collectives, the parameters' grad_partial axes.
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2" --mega-spmdize | FileCheck %s
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" --mega-spmdize | FileCheck %s --check-prefix=DP

// CHECK: #mesh = #mega.mesh<pp = 1, dp = 2, tp = 2>
// CHECK-NOT: #mega.sharding
// CHECK-LABEL: func.func @forward_backward(
// Local shapes; the global ones and the split axes are recorded.
// CHECK-SAME: %[[IDS:arg[0-9]+]]: tensor<2x4xi64> {mega.dim_axes = {{\[\[}}"dp"], []], mega.global_shape = array<i64: 4, 4>, mega.input = "input_ids"}
// Every parameter is used on a batch split over dp, where it is whole: grad_partial = ["dp"].
// CHECK-SAME: %[[WTE:arg[0-9]+]]: tensor<8x8xf32> {mega.dim_axes = {{\[\[}}"tp"], []], mega.global_shape = array<i64: 16, 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "wte"}
// CHECK-SAME: %[[WPE:arg[0-9]+]]: tensor<4x8xf32> {mega.dim_axes = {{\[\[}}], []], mega.global_shape = array<i64: 4, 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "wpe"}
// CHECK-SAME: tensor<8xf32> {mega.dim_axes = {{\[\[}}]], mega.global_shape = array<i64: 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "h0.ln1.weight"}
// CHECK-SAME: %[[QW:arg[0-9]+]]: tensor<4x8xf32> {mega.dim_axes = {{\[\[}}"tp"], []], mega.global_shape = array<i64: 8, 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "h0.attn.q.weight"}
// CHECK-SAME: %[[QB:arg[0-9]+]]: tensor<4xf32> {mega.dim_axes = {{\[\[}}"tp"]], mega.global_shape = array<i64: 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "h0.attn.q.bias"}
// CHECK-SAME: %[[KW:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.param = "h0.attn.k.weight"}
// CHECK-SAME: %[[VW:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.param = "h0.attn.v.weight"}
// CHECK-SAME: %[[PW:arg[0-9]+]]: tensor<8x4xf32> {mega.dim_axes = {{\[\[}}], ["tp"]], mega.global_shape = array<i64: 8, 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "h0.attn.proj.weight"}
// CHECK-SAME: %[[PB:arg[0-9]+]]: tensor<8xf32> {mega.dim_axes = {{\[\[}}]], mega.global_shape = array<i64: 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "h0.attn.proj.bias"}
// CHECK-SAME: %[[FW:arg[0-9]+]]: tensor<16x8xf32> {mega.dim_axes = {{\[\[}}"tp"], []], mega.global_shape = array<i64: 32, 8>, {{[^}]*}}mega.param = "h0.mlp.fc.weight"}
// CHECK-SAME: %[[FB:arg[0-9]+]]: tensor<16xf32> {{[^}]*}}mega.param = "h0.mlp.fc.bias"}
// CHECK-SAME: %[[F2W:arg[0-9]+]]: tensor<8x16xf32> {mega.dim_axes = {{\[\[}}], ["tp"]], mega.global_shape = array<i64: 8, 32>, {{[^}]*}}mega.param = "h0.mlp.proj.weight"}
// CHECK-SAME: %[[LABELS:arg[0-9]+]]: tensor<2x4xi64> {mega.dim_axes = {{\[\[}}"dp"], []], mega.global_shape = array<i64: 4, 4>, mega.input = "labels"}
// CHECK-SAME: %[[NORM:arg[0-9]+]]: tensor<f32> {mega.dim_axes = [], mega.global_shape = array<i64>, mega.input = "loss_normalizer"}
// CHECK-SAME: -> (tensor<f32> {mega.output = "loss"})
// Vocab-parallel embedding, all-reduced over tp.
// CHECK: %[[E:.*]] = mega.embedding %[[WTE]][%[[IDS]]] {vocab_axes = ["tp"]} : tensor<8x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
// CHECK: %[[P:.*]] = mega.broadcast %[[WPE]] : tensor<4x8xf32> -> tensor<2x4x8xf32>
// CHECK: %[[EW:.*]] = mega.all_reduce sum %[[E]] on #mesh axes ["tp"] : tensor<2x4x8xf32>
// CHECK: %[[X0:.*]] = mega.add %[[EW]], %[[P]] : tensor<2x4x8xf32>
// CHECK: %[[LN1:.*]] = mega.layer_norm %[[X0]], {{.*}} -> tensor<2x4x8xf32>
// Megatron's f before every column-parallel linear (its gradient is summed over tp).
// CHECK: %[[C1:.*]] = mega.copy_to_shards %[[LN1]] on #mesh axes ["tp"] : tensor<2x4x8xf32>
// CHECK: %[[Q:.*]] = mega.linear %[[C1]], %[[QW]], %[[QB]] : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<2x4x4xf32>
// One head per rank.
// CHECK: mega.reshape %[[Q]] : tensor<2x4x4xf32> -> tensor<2x4x1x4xf32>
// CHECK: %[[C2:.*]] = mega.copy_to_shards %[[LN1]] on #mesh axes ["tp"]
// CHECK: mega.linear %[[C2]], %[[KW]]
// CHECK: %[[C3:.*]] = mega.copy_to_shards %[[LN1]] on #mesh axes ["tp"]
// CHECK: mega.linear %[[C3]], %[[VW]]
// CHECK: %[[ATT:.*]] = mega.attention {{.*}} causal : (tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>) -> tensor<2x4x1x4xf32>
// CHECK: %[[Y:.*]] = mega.reshape %[[ATT]] : tensor<2x4x1x4xf32> -> tensor<2x4x4xf32>
// Row-parallel out-projection: all-reduce over tp (Megatron's g), then the whole bias, then
// the residual.
// CHECK: %[[O:.*]] = mega.linear %[[Y]], %[[PW]] : (tensor<2x4x4xf32>, tensor<8x4xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[OB:.*]] = mega.broadcast %[[PB]] : tensor<8xf32> -> tensor<2x4x8xf32>
// CHECK: %[[OW:.*]] = mega.all_reduce sum %[[O]] on #mesh axes ["tp"] : tensor<2x4x8xf32>
// CHECK: %[[OS:.*]] = mega.add %[[OW]], %[[OB]]
// CHECK: %[[X1:.*]] = mega.add %[[X0]], %[[OS]]
// CHECK: %[[LN2:.*]] = mega.layer_norm %[[X1]]
// CHECK: %[[C4:.*]] = mega.copy_to_shards %[[LN2]] on #mesh axes ["tp"]
// CHECK: %[[H:.*]] = mega.linear %[[C4]], %[[FW]], %[[FB]] : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[G:.*]] = mega.gelu none %[[H]] : tensor<2x4x16xf32>
// CHECK: %[[M:.*]] = mega.linear %[[G]], %[[F2W]] : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[MW:.*]] = mega.all_reduce sum %[[M]] on #mesh axes ["tp"] : tensor<2x4x8xf32>
// CHECK: %[[MS:.*]] = mega.add %[[MW]], %{{.*}}
// CHECK: %[[X2:.*]] = mega.add %[[X1]], %[[MS]]
// CHECK: %[[LNF:.*]] = mega.layer_norm %[[X2]]
// The tied head: copy_to_shards, vocab-parallel logits and cross-entropy.
// CHECK: %[[C5:.*]] = mega.copy_to_shards %[[LNF]] on #mesh axes ["tp"]
// CHECK: %[[Z:.*]] = mega.linear %[[C5]], %[[WTE]] : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[CE:.*]] = mega.cross_entropy %[[Z]], %[[LABELS]] {ignore_index = -100 : i64, vocab_axes = ["tp"]} : tensor<2x4x8xf32>, tensor<2x4xi64> -> tensor<2x4xf32>
// The loss: the local sum, all-reduced over dp, times the global normalizer.
// CHECK: %[[S:.*]] = mega.reduce sum %[[CE]] over [0, 1] : tensor<2x4xf32> -> tensor<f32>
// CHECK: %[[SW:.*]] = mega.all_reduce sum %[[S]] on #mesh axes ["dp"] : tensor<f32>
// CHECK: %[[L:.*]] = mega.mul %[[SW]], %[[NORM]] : tensor<f32>
// CHECK: return %[[L]] : tensor<f32>
// CHECK-NOT: mega.reshard

// dp only: whole parameters and activations on half the batch; no tensor-parallel collectives.
// DP: #mesh = #mega.mesh<pp = 1, dp = 2, tp = 1>
// DP-LABEL: func.func @forward_backward(
// DP-SAME: tensor<2x4xi64> {mega.dim_axes = {{\[\[}}"dp"], []], mega.global_shape = array<i64: 4, 4>, mega.input = "input_ids"}
// DP-SAME: tensor<16x8xf32> {mega.dim_axes = {{\[\[}}], []], mega.global_shape = array<i64: 16, 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "wte"}
// DP-NOT: "tp"
// DP: mega.embedding %{{.*}} : tensor<16x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
// DP-NOT: copy_to_shards
// DP-NOT: "tp"
// DP: mega.cross_entropy %{{.*}} {ignore_index = -100 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64> -> tensor<2x4xf32>
// DP: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<f32>
// DP-NOT: "tp"

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
