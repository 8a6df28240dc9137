// Partitioning a one-layer BERT (megac import --model bert:layers=1,hidden=8,heads=2,seq=4,
// vocab=16,batch=4, inline below; masked LM): the attention mask is split over dp like the ids;
// the MLM head's transform is column parallel, its output all-gathered (no grad_partial: its
// gradient is this rank's slice) before the whole-hidden LayerNorm; the tied decoder is vocab
// parallel with its bias split alike.
// RUN: megac-opt %s --mega-training-loss="loss-kind=mlm" --mega-sharding-propagation="tp=2 dp=2" --mega-spmdize | FileCheck %s

// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[IDS:arg[0-9]+]]: tensor<2x4xi64> {mega.dim_axes = {{\[\[}}"dp"], []], mega.global_shape = array<i64: 4, 4>, mega.input = "input_ids"}
// CHECK-SAME: %[[MASK:arg[0-9]+]]: tensor<2x4xi64> {mega.dim_axes = {{\[\[}}"dp"], []], mega.global_shape = array<i64: 4, 4>, mega.input = "attention_mask"}
// CHECK-SAME: %[[WTE:arg[0-9]+]]: tensor<8x8xf32> {mega.dim_axes = {{\[\[}}"tp"], []], {{[^}]*}}mega.param = "wte"}
// CHECK-SAME: %[[TW:arg[0-9]+]]: tensor<4x8xf32> {mega.dim_axes = {{\[\[}}"tp"], []], {{[^}]*}}mega.param = "mlm.transform.weight"}
// CHECK-SAME: %[[TB:arg[0-9]+]]: tensor<4xf32> {{[^}]*}}mega.param = "mlm.transform.bias"}
// CHECK-SAME: %[[LNW:arg[0-9]+]]: tensor<8xf32> {mega.dim_axes = {{\[\[}}]], mega.global_shape = array<i64: 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "mlm.ln.weight"}
// CHECK-SAME: %[[LNB:arg[0-9]+]]: tensor<8xf32> {{[^}]*}}mega.param = "mlm.ln.bias"}
// CHECK-SAME: %[[DB:arg[0-9]+]]: tensor<8xf32> {mega.dim_axes = {{\[\[}}"tp"]], mega.global_shape = array<i64: 16>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "mlm.decoder.bias"}
// CHECK-SAME: %[[LABELS:arg[0-9]+]]: tensor<2x4xi64> {mega.dim_axes = {{\[\[}}"dp"], []], mega.global_shape = array<i64: 4, 4>, mega.input = "labels"}
// CHECK-SAME: attributes {mega.loss_kind = "mlm"}
// CHECK: mega.cast %[[MASK]] : tensor<2x4xi64> -> tensor<2x4xf32>
// CHECK: %[[E:.*]] = mega.embedding %[[WTE]][%[[IDS]]] {vocab_axes = ["tp"]} : tensor<8x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
// CHECK: mega.all_reduce sum %[[E]] on #mesh axes ["tp"] : tensor<2x4x8xf32>
// The additive mask enters the head-split attention through copy_to_shards.
// CHECK: %[[M:.*]] = mega.copy_to_shards %{{.*}} on #mesh axes ["tp"] : tensor<2x1x1x4xf32>
// CHECK: mega.attention %{{.*}}, %{{.*}}, %{{.*}} mask %[[M]] : (tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x4x1x4xf32>
// The MLM head.
// CHECK: %[[T:.*]] = mega.linear %{{.*}}, %[[TW]], %[[TB]] : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<2x4x4xf32>
// CHECK: %[[G:.*]] = mega.gelu none %[[T]] : tensor<2x4x4xf32>
// CHECK: %[[A:.*]] = mega.all_gather %[[G]] on #mesh axes ["tp"] dim 2 : tensor<2x4x4xf32> -> tensor<2x4x8xf32>
// CHECK: %[[LN:.*]] = mega.layer_norm %[[A]], %[[LNW]], %[[LNB]] {{.*}} -> tensor<2x4x8xf32>
// CHECK: %[[C:.*]] = mega.copy_to_shards %[[LN]] on #mesh axes ["tp"] : tensor<2x4x8xf32>
// CHECK: %[[Z:.*]] = mega.linear %[[C]], %[[WTE]], %[[DB]] : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK: mega.cross_entropy %[[Z]], %[[LABELS]] {ignore_index = -100 : i64, vocab_axes = ["tp"]} : tensor<2x4x8xf32>, tensor<2x4xi64> -> tensor<2x4xf32>
// CHECK: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<f32>
// CHECK: return

module attributes {mega.model = "bert:layers=1,hidden=8,heads=2,ffn=32,seq=4,vocab=16,batch=4,tied=1,gelu=erf,dtype=f32"} {
  func.func @bert(%arg0: tensor<4x4xi64> {mega.input = "input_ids"}, %arg1: tensor<4x4xi64> {mega.input = "attention_mask"}, %arg2: tensor<16x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wte"}, %arg3: tensor<4x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wpe"}, %arg4: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "ln_emb.weight"}, %arg5: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "ln_emb.bias"}, %arg6: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layer0.attn.q.weight"}, %arg7: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "layer0.attn.q.bias"}, %arg8: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layer0.attn.k.weight"}, %arg9: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "layer0.attn.k.bias"}, %arg10: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layer0.attn.v.weight"}, %arg11: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "layer0.attn.v.bias"}, %arg12: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "layer0.attn.proj.weight"}, %arg13: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "layer0.attn.proj.bias"}, %arg14: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "layer0.ln1.weight"}, %arg15: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "layer0.ln1.bias"}, %arg16: tensor<32x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layer0.mlp.fc.weight"}, %arg17: tensor<32xf32> {mega.init = #mega.init<zeros>, mega.param = "layer0.mlp.fc.bias"}, %arg18: tensor<8x32xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "layer0.mlp.proj.weight"}, %arg19: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "layer0.mlp.proj.bias"}, %arg20: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "layer0.ln2.weight"}, %arg21: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "layer0.ln2.bias"}, %arg22: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "mlm.transform.weight"}, %arg23: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "mlm.transform.bias"}, %arg24: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "mlm.ln.weight"}, %arg25: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "mlm.ln.bias"}, %arg26: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "mlm.decoder.bias"}) -> (tensor<4x4x16xf32> {mega.output = "logits"}) {
    %0 = mega.cast %arg1 : tensor<4x4xi64> -> tensor<4x4xf32>
    %1 = mega.constant dense<1.000000e+00> : tensor<f32>
    %2 = mega.broadcast %1 : tensor<f32> -> tensor<4x4xf32>
    %3 = mega.sub %2, %0 : tensor<4x4xf32>
    %4 = mega.constant dense<-1.000000e+04> : tensor<f32>
    %5 = mega.broadcast %4 : tensor<f32> -> tensor<4x4xf32>
    %6 = mega.mul %3, %5 : tensor<4x4xf32>
    %7 = mega.reshape %6 : tensor<4x4xf32> -> tensor<4x1x1x4xf32>
    %8 = mega.embedding %arg2[%arg0] : tensor<16x8xf32>, tensor<4x4xi64> -> tensor<4x4x8xf32>
    %9 = mega.broadcast %arg3 : tensor<4x8xf32> -> tensor<4x4x8xf32>
    %10 = mega.add %8, %9 : tensor<4x4x8xf32>
    %11 = mega.layer_norm %10, %arg4, %arg5 eps 9.9999999999999998E-13 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %12 = mega.linear %11, %arg6, %arg7 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %13 = mega.reshape %12 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %14 = mega.linear %11, %arg8, %arg9 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %15 = mega.reshape %14 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %16 = mega.linear %11, %arg10, %arg11 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %17 = mega.reshape %16 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %18 = mega.attention %13, %15, %17 mask %7 : (tensor<4x4x2x4xf32>, tensor<4x4x2x4xf32>, tensor<4x4x2x4xf32>, tensor<4x1x1x4xf32>) -> tensor<4x4x2x4xf32>
    %19 = mega.reshape %18 : tensor<4x4x2x4xf32> -> tensor<4x4x8xf32>
    %20 = mega.linear %19, %arg12, %arg13 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %21 = mega.add %11, %20 : tensor<4x4x8xf32>
    %22 = mega.layer_norm %21, %arg14, %arg15 eps 9.9999999999999998E-13 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %23 = mega.linear %22, %arg16, %arg17 : (tensor<4x4x8xf32>, tensor<32x8xf32>, tensor<32xf32>) -> tensor<4x4x32xf32>
    %24 = mega.gelu none %23 : tensor<4x4x32xf32>
    %25 = mega.linear %24, %arg18, %arg19 : (tensor<4x4x32xf32>, tensor<8x32xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %26 = mega.add %22, %25 : tensor<4x4x8xf32>
    %27 = mega.layer_norm %26, %arg20, %arg21 eps 9.9999999999999998E-13 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %28 = mega.linear %27, %arg22, %arg23 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %29 = mega.gelu none %28 : tensor<4x4x8xf32>
    %30 = mega.layer_norm %29, %arg24, %arg25 eps 9.9999999999999998E-13 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %31 = mega.linear %30, %arg2, %arg26 : (tensor<4x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<4x4x16xf32>
    return %31 : tensor<4x4x16xf32>
  }
}
