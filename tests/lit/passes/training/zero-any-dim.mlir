// mega-training-optimizer under ZeRO-3 (docs/training-step.md, "ZeRO-2 and ZeRO-3"): a parameter
// whose dim 0 dp does not divide is sharded on its first dim that dp does divide. The one-layer
// GPT of zero.mlir with ffn 6 at dp 4: h0.mlp.fc.weight is [6, 8], stored as [6, 2] (dp on dim 1),
// gathered and reduce-scattered on dim 1; h0.mlp.proj.weight [8, 6] keeps dim 0. Its bias [6] has
// no dim dp 4 divides: a padded shard of ceil(6 / 4) = 2 rows (rank 3's both padding),
// all-gathered into [8] and sliced to [6] before its use; its gradient padded with 2 zeros to
// [8] and reduce-scattered into the [2] accumulator; @apply_gradients has no dp collective.
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=4" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=3" --canonicalize --cse | FileCheck %s
// ZeRO-2's shards stay on dim 0 (its @apply_gradients buckets view a shard as [dp, n/dp]):
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=4" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=2" | FileCheck %s --check-prefix=Z2

// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[W:arg[0-9]+]]: tensor<6x2xf32> {mega.dim_axes = {{\[\[\], \["dp"\]\]}}, mega.global_shape = array<i64: 6, 8>, mega.grad_partial = ["dp"], {{.*}}mega.param = "h0.mlp.fc.weight"}
// CHECK-SAME: %[[B:arg[0-9]+]]: tensor<2xf32> {mega.dim_axes = {{\[\["dp"\]\]}}, mega.global_shape = array<i64: 6>, mega.grad_partial = ["dp"], {{.*}}mega.param = "h0.mlp.fc.bias"}
// CHECK-SAME: tensor<2x6xf32> {mega.dim_axes = {{\[\["dp"\], \[\]\]}}, mega.global_shape = array<i64: 8, 6>, {{.*}}mega.param = "h0.mlp.proj.weight"}
// CHECK-SAME: tensor<6x2xf32> {mega.dim_axes = {{\[\[\], \["dp"\]\]}}, mega.global_shape = array<i64: 6, 8>, mega.state = "grad.h0.mlp.fc.weight"}
// CHECK-SAME: %[[BACC:arg[0-9]+]]: tensor<2xf32> {mega.dim_axes = {{\[\["dp"\]\]}}, mega.global_shape = array<i64: 6>, mega.state = "grad.h0.mlp.fc.bias"}
// CHECK: %[[F:.*]] = mega.all_gather %[[W]] on #mesh axes ["dp"] dim 1 : tensor<6x2xf32> -> tensor<6x8xf32>
// CHECK-NEXT: %[[BG:.*]] = mega.all_gather %[[B]] on #mesh axes ["dp"] dim 0 : tensor<2xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[BS:.*]] = mega.slice %[[BG]] [0] to [6] step [1] : tensor<8xf32> -> tensor<6xf32>
// CHECK-NEXT: mega.linear %{{.*}}, %[[F]], %[[BS]]
// CHECK: mega.all_gather %[[W]] on #mesh axes ["dp"] dim 1 {mega.regather} : tensor<6x2xf32> -> tensor<6x8xf32>
// CHECK: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 1 : tensor<6x8xf32> -> tensor<6x2xf32>
// CHECK: %[[PAD:.*]] = mega.pad %{{.*}} low [0] high [2] interior [0] : tensor<6xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[RS:.*]] = mega.reduce_scatter sum %[[PAD]] on #mesh axes ["dp"] dim 0 : tensor<8xf32> -> tensor<2xf32>
// CHECK-NEXT: mega.add %[[BACC]], %[[RS]] : tensor<2xf32>
// CHECK: return
// CHECK-LABEL: func.func @apply_gradients(
// CHECK-SAME: tensor<6x2xf32> {mega.dim_axes = {{\[\[\], \["dp"\]\]}}, mega.global_shape = array<i64: 6, 8>, mega.state = "adam.m.h0.mlp.fc.weight"}
// CHECK-SAME: tensor<2xf32> {mega.dim_axes = {{\[\["dp"\]\]}}, mega.global_shape = array<i64: 6>, mega.state = "adam.m.h0.mlp.fc.bias"}
// CHECK-NOT: tensor<6xf32>
// CHECK-NOT: mega.all_gather
// CHECK: mega.adamw_update
// CHECK-NOT: mega.all_gather
// CHECK: return

// Z2-LABEL: func.func @forward_backward(
// Z2-SAME: tensor<6x8xf32> {mega.grad_partial = ["dp"], mega.state = "grad.h0.mlp.fc.weight"}
// Z2-SAME: tensor<2x6xf32> {mega.dim_axes = {{\[\["dp"\], \[\]\]}}, mega.global_shape = array<i64: 8, 6>, mega.state = "grad.h0.mlp.proj.weight"}
// Z2-NOT: dim 1
// Z2: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<8x6xf32> -> tensor<2x6xf32>
// Z2-NOT: dim 1
// Z2: return

module attributes {mega.model = "gpt:layers=1,hidden=8,heads=2,ffn=6,seq=4,vocab=16,batch=4,tied=1,gelu=erf,dtype=f32"} {
  func.func @gpt(%arg0: tensor<4x4xi64> {mega.input = "input_ids"}, %arg1: tensor<16x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wte"}, %arg2: tensor<4x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wpe"}, %arg3: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln1.weight"}, %arg4: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln1.bias"}, %arg5: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.q.weight"}, %arg6: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.q.bias"}, %arg7: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.k.weight"}, %arg8: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.k.bias"}, %arg9: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.v.weight"}, %arg10: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.v.bias"}, %arg11: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.attn.proj.weight"}, %arg12: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.proj.bias"}, %arg13: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln2.weight"}, %arg14: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln2.bias"}, %arg15: tensor<6x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.mlp.fc.weight"}, %arg16: tensor<6xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.fc.bias"}, %arg17: tensor<8x6xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.mlp.proj.weight"}, %arg18: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.proj.bias"}, %arg19: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "ln_f.weight"}, %arg20: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "ln_f.bias"}) -> (tensor<4x4x16xf32> {mega.output = "logits"}) {
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
    %15 = mega.linear %14, %arg15, %arg16 : (tensor<4x4x8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<4x4x6xf32>
    %16 = mega.gelu none %15 : tensor<4x4x6xf32>
    %17 = mega.linear %16, %arg17, %arg18 : (tensor<4x4x6xf32>, tensor<8x6xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %18 = mega.add %13, %17 : tensor<4x4x8xf32>
    %19 = mega.layer_norm %18, %arg19, %arg20 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %20 = mega.linear %19, %arg1 : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    return %20 : tensor<4x4x16xf32>
  }
}
