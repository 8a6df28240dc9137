// Sequence parallelism (mega-sharding-propagation sequence-parallel=true, then mega-spmdize) on
// a one-layer GPT (megac import --model gpt:layers=1,hidden=8,heads=2,seq=4,vocab=16,batch=4,
// inline below): tensor-parallel partial sums are reduce-scattered on the sequence dim, norms
// and residuals run on [b/dp, s/tp, h] slices, and all_gather (grad_partial) feeds the
// column-parallel linears. Norm weights and row-parallel biases get grad_partial = [dp, tp].
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2 sequence-parallel=true" | FileCheck %s --check-prefix=PROP
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2 sequence-parallel=true" --mega-spmdize | FileCheck %s
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2 sequence-parallel=true" --mega-spmdize | FileCheck %s --check-prefix=NOTP

// PROP-LABEL: func.func @forward_backward(
// PROP: %[[E:.*]] = mega.embedding {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []], partial = sum(tp)>>
// PROP: mega.reshard %[[E]] : {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [tp], []]>>
// PROP: %[[LN1:.*]] = mega.layer_norm {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [tp], []]>>
// PROP: %[[G1:.*]] = mega.reshard %[[LN1]] : tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [tp], []]>> -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// PROP: mega.linear %[[G1]], {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], [tp]]>>
// PROP: %[[O:.*]] = mega.linear {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []], partial = sum(tp)>>
// PROP: mega.reshard %[[O]] : {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [tp], []]>>
// PROP: mega.layer_norm {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [tp], []]>>

// CHECK: #mesh = #mega.mesh<pp = 1, dp = 2, tp = 2>
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[IDS:arg[0-9]+]]: tensor<2x4xi64>
// CHECK-SAME: %[[WTE:arg[0-9]+]]: tensor<8x8xf32> {{[^}]*}}mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "wte"}
// The positions are broadcast whole and sliced: their gradient is all-gathered back, so whole.
// CHECK-SAME: %[[WPE:arg[0-9]+]]: tensor<4x8xf32> {mega.dim_axes = {{\[\[}}], []], mega.global_shape = array<i64: 4, 8>, mega.init = {{[^}]*}}, mega.param = "wpe"}
// Norm weights act on sequence slices: their gradients are partial over dp and tp.
// CHECK-SAME: %[[LN1W:arg[0-9]+]]: tensor<8xf32> {{[^}]*}}mega.grad_partial = ["dp", "tp"], {{[^}]*}}mega.param = "h0.ln1.weight"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.grad_partial = ["dp", "tp"], {{[^}]*}}mega.param = "h0.ln1.bias"}
// CHECK-SAME: %[[QW:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "h0.attn.q.weight"}
// CHECK-SAME: tensor<8x4xf32> {{[^}]*}}mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "h0.attn.proj.weight"}
// The row-parallel bias is added on sequence slices too.
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.grad_partial = ["dp", "tp"], {{[^}]*}}mega.param = "h0.attn.proj.bias"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.grad_partial = ["dp", "tp"], {{[^}]*}}mega.param = "h0.ln2.weight"}
// CHECK-SAME: tensor<16x8xf32> {{[^}]*}}mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "h0.mlp.fc.weight"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.grad_partial = ["dp", "tp"], {{[^}]*}}mega.param = "h0.mlp.proj.bias"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.grad_partial = ["dp", "tp"], {{[^}]*}}mega.param = "ln_f.weight"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.grad_partial = ["dp", "tp"], {{[^}]*}}mega.param = "ln_f.bias"}
// The embedding's partial sum is reduce-scattered on the sequence dim (dim 1).
// CHECK: %[[E:.*]] = mega.embedding %[[WTE]][%[[IDS]]] {vocab_axes = ["tp"]} : tensor<8x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
// The position table is sliced on its sequence dim before it is broadcast (the broadcast makes
// the batch and sequence slice this rank needs, no dp slice of a whole batch); its gradient is
// all-gathered over tp and summed over dp.
// CHECK: %[[WPES:.*]] = mega.shard_slice %[[WPE]] on #mesh axes ["tp"] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK: %[[WPEC:.*]] = mega.copy_to_shards %[[WPES]] on #mesh axes ["dp"] : tensor<2x8xf32>
// CHECK: %[[PS:.*]] = mega.broadcast %[[WPEC]] : tensor<2x8xf32> -> tensor<2x2x8xf32>
// CHECK: %[[ES:.*]] = mega.reduce_scatter sum %[[E]] on #mesh axes ["tp"] dim 1 : tensor<2x4x8xf32> -> tensor<2x2x8xf32>
// CHECK: %[[X0:.*]] = mega.add %[[ES]], %[[PS]] : tensor<2x2x8xf32>
// CHECK: %[[LN1:.*]] = mega.layer_norm %[[X0]], %[[LN1W]], %{{.*}} eps 1.000000e-05 : (tensor<2x2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x2x8xf32>
// all_gather before the column-parallel linears (grad_partial: its gradient is reduce-scattered).
// CHECK: %[[A1:.*]] = mega.all_gather %[[LN1]] on #mesh axes ["tp"] dim 1 grad_partial : tensor<2x2x8xf32> -> tensor<2x4x8xf32>
// CHECK: mega.linear %[[A1]], %[[QW]], %{{.*}} : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<2x4x4xf32>
// CHECK: mega.all_gather %[[LN1]] on #mesh axes ["tp"] dim 1 grad_partial
// CHECK: mega.all_gather %[[LN1]] on #mesh axes ["tp"] dim 1 grad_partial
// CHECK: %[[O:.*]] = mega.linear %{{.*}} : (tensor<2x4x4xf32>, tensor<8x4xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[OB:.*]] = mega.broadcast %{{.*}} : tensor<8xf32> -> tensor<2x2x8xf32>
// CHECK: %[[OS:.*]] = mega.reduce_scatter sum %[[O]] on #mesh axes ["tp"] dim 1 : tensor<2x4x8xf32> -> tensor<2x2x8xf32>
// CHECK: %[[OSUM:.*]] = mega.add %[[OS]], %[[OB]] : tensor<2x2x8xf32>
// CHECK: %[[X1:.*]] = mega.add %[[X0]], %[[OSUM]] : tensor<2x2x8xf32>
// CHECK: %[[LN2:.*]] = mega.layer_norm %[[X1]], {{.*}} -> tensor<2x2x8xf32>
// CHECK: %[[A4:.*]] = mega.all_gather %[[LN2]] on #mesh axes ["tp"] dim 1 grad_partial : tensor<2x2x8xf32> -> tensor<2x4x8xf32>
// CHECK: mega.linear %[[A4]], {{.*}} -> tensor<2x4x16xf32>
// CHECK: %[[M:.*]] = mega.linear {{.*}} : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[MS:.*]] = mega.reduce_scatter sum %[[M]] on #mesh axes ["tp"] dim 1 : tensor<2x4x8xf32> -> tensor<2x2x8xf32>
// CHECK: %[[LNF:.*]] = mega.layer_norm {{.*}} -> tensor<2x2x8xf32>
// CHECK: %[[A5:.*]] = mega.all_gather %[[LNF]] on #mesh axes ["tp"] dim 1 grad_partial : tensor<2x2x8xf32> -> tensor<2x4x8xf32>
// CHECK: %[[Z:.*]] = mega.linear %[[A5]], %[[WTE]] : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK: mega.cross_entropy %[[Z]], %{{.*}} {ignore_index = -100 : i64, vocab_axes = ["tp"]}
// CHECK: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<f32>
// CHECK: return
// No tensor-parallel all_reduce nor copy_to_shards anywhere with sequence parallelism.
// NOTP-NOT: all_reduce sum {{.*}} axes ["tp"]
// NOTP-NOT: copy_to_shards {{.*}} axes ["tp"]

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
