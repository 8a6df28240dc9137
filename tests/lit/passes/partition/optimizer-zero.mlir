// The partitioned training step after autodiff: mega-training-optimizer reduces the gradients
// over dp (grad_partial), with zero=1 as reduce_scatter + a 1/dp shard of AdamW + all_gather
// (Megatron's distributed optimizer). One-layer GPT (megac import --model
// gpt:layers=1,hidden=8,heads=2,seq=4,vocab=16,batch=4), inline below.
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=1" | FileCheck %s
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer | FileCheck %s --check-prefix=ZERO0
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2 sequence-parallel=true" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=1" | FileCheck %s --check-prefix=SP
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2" --mega-spmdize --mega-training-autodiff | FileCheck %s --check-prefix=BWD

// The backward half: each copy_to_shards' gradient is an all_reduce over tp; the loss's
// all_reduce over dp has the identity as gradient (nothing more over dp in @forward_backward).
// BWD-LABEL: func.func @forward_backward(
// BWD-SAME: %{{.*}}: tensor<8x8xf32> {mega.grad_partial = ["dp"], mega.state = "grad.wte"}
// BWD: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<f32>
// BWD-COUNT-5: mega.all_reduce sum %{{.*}} on #mesh axes ["tp"] : tensor<2x4x8xf32>
// BWD-NOT: mega.all_reduce
// BWD: return

// zero=1: moments hold a 1/dp shard of each tensor-parallel shard.
// CHECK-LABEL: func.func @apply_gradients(
// CHECK-SAME: %[[WTE:arg[0-9]+]]: tensor<8x8xf32> {mega.dim_axes = {{\[\[}}"tp"], []], {{[^}]*}}mega.param = "wte"}
// CHECK-SAME: %[[WPE:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.param = "wpe"}
// CHECK-SAME: %[[GWTE:arg[0-9]+]]: tensor<8x8xf32> {{[^}]*}}mega.state = "grad.wte"}
// CHECK-SAME: %[[GWPE:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.state = "grad.wpe"}
// CHECK-SAME: %[[MWTE:arg[0-9]+]]: tensor<4x8xf32> {mega.dim_axes = {{\[\[}}"tp", "dp"], []], mega.global_shape = array<i64: 16, 8>, mega.state = "adam.m.wte"}
// CHECK-SAME: %[[MWPE:arg[0-9]+]]: tensor<2x8xf32> {mega.dim_axes = {{\[\[}}"dp"], []], mega.global_shape = array<i64: 4, 8>, mega.state = "adam.m.wpe"}
// CHECK-SAME: %[[VWTE:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.state = "adam.v.wte"}
// CHECK-SAME: %[[LR:arg[0-9]+]]: tensor<f32> {mega.input = "lr"}, %[[STEP:arg[0-9]+]]: tensor<i64> {mega.input = "step"}
// CHECK-SAME: -> (tensor<8x8xf32> {mega.updates = "wte"}, tensor<4x8xf32> {mega.updates = "wpe"}
// CHECK-SAME: tensor<4x8xf32> {mega.updates = "adam.m.wte"}, tensor<2x8xf32> {mega.updates = "adam.m.wpe"}
// Gradients: reduce_scatter over dp, in one bucket at the default bucket size (each as
// [dp, n/dp], concatenated along dim 1, flattened; optimizer-buckets.mlir), no all_reduce.
// CHECK: %[[CWTE:.*]] = mega.reshape %[[GWTE]] : tensor<8x8xf32> -> tensor<2x32xf32>
// CHECK-NEXT: %[[CWPE:.*]] = mega.reshape %[[GWPE]] : tensor<4x8xf32> -> tensor<2x16xf32>
// CHECK: %[[BUCKET:.*]] = mega.concat %[[CWTE]], %[[CWPE]], {{.*}} axis 1 : {{.*}} -> tensor<2x286xf32>
// CHECK-NEXT: %[[FLAT:.*]] = mega.reshape %[[BUCKET]] : tensor<2x286xf32> -> tensor<572xf32>
// CHECK-NEXT: %[[R:.*]] = mega.reduce_scatter sum %[[FLAT]] on #mesh axes ["dp"] dim 0 : tensor<572xf32> -> tensor<286xf32>
// CHECK-NEXT: %[[PIECE:.*]] = mega.slice %[[R]] [0] to [32] step [1] : tensor<286xf32> -> tensor<32xf32>
// CHECK-NEXT: %[[RWTE:.*]] = mega.reshape %[[PIECE]] : tensor<32xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[PIECE2:.*]] = mega.slice %[[R]] [32] to [48] step [1] : tensor<286xf32> -> tensor<16xf32>
// CHECK-NEXT: %[[RWPE:.*]] = mega.reshape %[[PIECE2]] : tensor<16xf32> -> tensor<2x8xf32>
// CHECK-NOT: mega.reduce_scatter
// The global norm: shards whole on tp summed over dp; tp-split shards over dp and tp.
// CHECK-DAG: %[[NDP:.*]] = mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<f32>
// CHECK-DAG: %[[NTP:.*]] = mega.all_reduce sum %{{.*}} on #mesh axes ["dp", "tp"] : tensor<f32>
// CHECK: %[[N2:.*]] = mega.add %[[NDP]], %[[NTP]] : tensor<f32>
// CHECK: %[[NORM:.*]] = mega.sqrt %[[N2]] : tensor<f32>
// Each rank updates its dp shard of the parameter; the updated shards are all-gathered in
// one bucket (concatenated, gathered into [dp, 286], each member's columns reshaped back).
// CHECK: %[[SWTE:.*]] = mega.shard_slice %[[WTE]] on #mesh axes ["dp"] dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
// CHECK: %[[PWTE:.*]], %[[M2WTE:.*]], %[[V2WTE:.*]] = mega.adamw_update %[[SWTE]], %[[RWTE]], %[[MWTE]], %[[VWTE]], %[[LR]], %[[STEP]] {{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>, tensor<i64>)
// CHECK: %[[SWPE:.*]] = mega.shard_slice %[[WPE]] on #mesh axes ["dp"] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK: mega.adamw_update %[[SWPE]], %[[RWPE]], %[[MWPE]]
// CHECK-NOT: mega.all_gather
// CHECK: %[[FWTE:.*]] = mega.reshape %[[PWTE]] : tensor<4x8xf32> -> tensor<32xf32>
// CHECK: %[[JOINED:.*]] = mega.concat %[[FWTE]], {{.*}} axis 0 : {{.*}} -> tensor<286xf32>
// CHECK-NEXT: %[[ALL:.*]] = mega.all_gather %[[JOINED]] on #mesh axes ["dp"] dim 0 : tensor<286xf32> -> tensor<572xf32>
// CHECK-NEXT: %[[ROWS:.*]] = mega.reshape %[[ALL]] : tensor<572xf32> -> tensor<2x286xf32>
// CHECK-NEXT: %[[COLS:.*]] = mega.slice %[[ROWS]] [0, 0] to [2, 32] step [1, 1] : tensor<2x286xf32> -> tensor<2x32xf32>
// CHECK-NEXT: %[[GATHERED:.*]] = mega.reshape %[[COLS]] : tensor<2x32xf32> -> tensor<8x8xf32>
// CHECK-NOT: mega.all_gather
// CHECK: return %[[GATHERED]], {{.*}}, %[[M2WTE]], {{.*}}, %[[V2WTE]], {{.*}}, %[[NORM]] :

// zero=0: the gradients all-reduced over dp in one bucket (flattened, concatenated, reduced,
// split back), AdamW on the whole tensor-parallel shard.
// ZERO0-LABEL: func.func @apply_gradients(
// ZERO0-SAME: tensor<8x8xf32> {{[^}]*}}mega.state = "adam.m.wte"}
// ZERO0: %[[FLAT:.*]] = mega.reshape %{{.*}} : tensor<8x8xf32> -> tensor<64xf32>
// ZERO0: %[[BUCKET:.*]] = mega.concat %[[FLAT]], {{.*}} axis 0 : {{.*}} -> tensor<572xf32>
// ZERO0-NEXT: %[[SUM:.*]] = mega.all_reduce sum %[[BUCKET]] on #mesh axes ["dp"] : tensor<572xf32>
// ZERO0-NEXT: %[[PIECE:.*]] = mega.slice %[[SUM]] [0] to [64] step [1] : tensor<572xf32> -> tensor<64xf32>
// ZERO0-NEXT: %[[G:.*]] = mega.reshape %[[PIECE]] : tensor<64xf32> -> tensor<8x8xf32>
// ZERO0-NOT: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<{{[0-9x]+}}xf32>
// ZERO0: mega.all_reduce sum %{{.*}} on #mesh axes ["tp"] : tensor<f32>
// ZERO0: mega.adamw_update %{{.*}}, %[[G]], {{.*}} : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i64>)
// ZERO0-NOT: reduce_scatter
// ZERO0-NOT: all_gather
// ZERO0-NOT: shard_slice

// Sequence parallel + zero=1: norm weights' gradients (partial over dp and tp) are
// reduce-scattered over dp and all-reduced over tp; the positions' gradient is complete
// already (no grad_partial): plain AdamW, moments whole.
// SP-LABEL: func.func @apply_gradients(
// SP-SAME: %[[WPE:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.param = "wpe"}
// SP-SAME: %[[GWPE:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.state = "grad.wpe"}
// SP-SAME: %[[GLN:arg[0-9]+]]: tensor<8xf32> {mega.dim_axes = {{\[\[}}]], mega.global_shape = array<i64: 8>, mega.grad_partial = ["dp", "tp"], mega.state = "grad.h0.ln1.weight"}
// SP-SAME: tensor<4x8xf32> {{[^}]*}}mega.state = "adam.m.wpe"}
// SP-SAME: tensor<4xf32> {mega.dim_axes = {{\[\[}}"dp"]], mega.global_shape = array<i64: 8>, mega.state = "adam.m.h0.ln1.weight"}
// SP-NOT: reduce_scatter sum %[[GWPE]]
// SP: %[[CLN:.*]] = mega.reshape %[[GLN]] : tensor<8xf32> -> tensor<2x4xf32>
// SP: %[[R:.*]] = mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<{{[0-9]+}}xf32> -> tensor<{{[0-9]+}}xf32>
// SP: %[[LN:.*]] = mega.slice %[[R]] [{{[0-9]+}}] to [{{[0-9]+}}] step [1] : tensor<{{[0-9]+}}xf32> -> tensor<4xf32>
// SP: mega.all_reduce sum %[[LN]] on #mesh axes ["tp"] : tensor<4xf32>
// SP-NOT: reduce_scatter sum %[[GWPE]]
// SP: mega.adamw_update %[[WPE]], %[[GWPE]], {{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>, tensor<i64>)

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
