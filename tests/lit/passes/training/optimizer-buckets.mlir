// mega-training-optimizer's buckets (docs/training-step.md, "Buckets"): with bucket-size=200 the
// dp reduction of a one-layer GPT (20 parameter tensors; megac import --model
// gpt:layers=1,hidden=8,heads=2,seq=4,vocab=16,batch=4, inline below) is 7 collectives, not 20.
// Local gradient sizes at dp 2, in parameter order: wte 128, wpe 32, ln1 8+8, q/k/v/proj
// 64+8 each, ln2 8+8, fc 256+32, mlp.proj 256+8, ln_f 8+8. Filled in order, a bucket closes
// before the tensor that would take it past 200: [wte wpe ln1.w ln1.b] 176, [q.w q.b k.w k.b]
// 144, [v.w v.b proj.w proj.b ln2.w ln2.b] 160, [fc.w] 256 (larger than a bucket: alone),
// [fc.b] 32, [mlp.proj.w] 256, [mlp.proj.b ln_f.w ln_f.b] 24.
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=1 bucket-size=200" | FileCheck %s
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="bucket-size=200" | FileCheck %s --check-prefix=AR
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=1" | FileCheck %s --check-prefix=DEFAULT
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2 sequence-parallel=true" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=1 bucket-size=60" | FileCheck %s --check-prefix=SP

// ZeRO-1: each member as [dp, n/dp] (row r: rank r's dim-0 shard), concatenated along dim 1,
// flattened, one reduce_scatter over dp per bucket; the rank's row sliced back into members.
// CHECK-LABEL: func.func @apply_gradients(
// CHECK: %[[C0:.*]] = mega.reshape %{{.*}} : tensor<16x8xf32> -> tensor<2x64xf32>
// CHECK-NEXT: %[[C1:.*]] = mega.reshape %{{.*}} : tensor<4x8xf32> -> tensor<2x16xf32>
// CHECK-NEXT: %[[C2:.*]] = mega.reshape %{{.*}} : tensor<8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[C3:.*]] = mega.reshape %{{.*}} : tensor<8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[M:.*]] = mega.concat %[[C0]], %[[C1]], %[[C2]], %[[C3]] axis 1 : (tensor<2x64xf32>, tensor<2x16xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x88xf32>
// CHECK-NEXT: %[[F:.*]] = mega.reshape %[[M]] : tensor<2x88xf32> -> tensor<176xf32>
// CHECK-NEXT: %[[R:.*]] = mega.reduce_scatter sum %[[F]] on #mesh axes ["dp"] dim 0 : tensor<176xf32> -> tensor<88xf32>
// CHECK-NEXT: %[[P0:.*]] = mega.slice %[[R]] [0] to [64] step [1] : tensor<88xf32> -> tensor<64xf32>
// CHECK-NEXT: %[[GWTE:.*]] = mega.reshape %[[P0]] : tensor<64xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[P1:.*]] = mega.slice %[[R]] [64] to [80] step [1] : tensor<88xf32> -> tensor<16xf32>
// CHECK-NEXT: mega.reshape %[[P1]] : tensor<16xf32> -> tensor<2x8xf32>
// CHECK-NEXT: mega.slice %[[R]] [80] to [84] step [1] : tensor<88xf32> -> tensor<4xf32>
// CHECK-NEXT: mega.slice %[[R]] [84] to [88] step [1] : tensor<88xf32> -> tensor<4xf32>
// CHECK: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<144xf32> -> tensor<72xf32>
// CHECK: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<160xf32> -> tensor<80xf32>
// CHECK: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<32x8xf32> -> tensor<16x8xf32>
// CHECK: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<32xf32> -> tensor<16xf32>
// CHECK: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<8x32xf32> -> tensor<4x32xf32>
// CHECK: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<24xf32> -> tensor<12xf32>
// CHECK-NOT: mega.reduce_scatter
// CHECK: %{{.*}}, %{{.*}}, %{{.*}} = mega.adamw_update %{{.*}}, %[[GWTE]], %{{.*}} : (tensor<8x8xf32>,
// The updated shards: concatenated, one all_gather per bucket, each member's columns of
// [dp, sum n/dp] reshaped back to the parameter.
// CHECK: %[[J:.*]] = mega.concat %{{.*}} axis 0 : (tensor<64xf32>, tensor<16xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<88xf32>
// CHECK-NEXT: %[[G:.*]] = mega.all_gather %[[J]] on #mesh axes ["dp"] dim 0 : tensor<88xf32> -> tensor<176xf32>
// CHECK-NEXT: %[[GM:.*]] = mega.reshape %[[G]] : tensor<176xf32> -> tensor<2x88xf32>
// CHECK-NEXT: %[[COLS:.*]] = mega.slice %[[GM]] [0, 0] to [2, 64] step [1, 1] : tensor<2x88xf32> -> tensor<2x64xf32>
// CHECK-NEXT: %[[WTE:.*]] = mega.reshape %[[COLS]] : tensor<2x64xf32> -> tensor<16x8xf32>
// CHECK-NEXT: mega.slice %[[GM]] [0, 64] to [2, 80] step [1, 1] : tensor<2x88xf32> -> tensor<2x16xf32>
// CHECK: mega.all_gather %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<72xf32> -> tensor<144xf32>
// CHECK: mega.all_gather %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<80xf32> -> tensor<160xf32>
// CHECK: mega.all_gather %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<16x8xf32> -> tensor<32x8xf32>
// CHECK: mega.all_gather %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<16xf32> -> tensor<32xf32>
// CHECK: mega.all_gather %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<4x32xf32> -> tensor<8x32xf32>
// CHECK: mega.all_gather %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<12xf32> -> tensor<24xf32>
// CHECK-NOT: mega.all_gather
// CHECK: return %[[WTE]],

// zero=0: the same 7 buckets, flattened and concatenated, one all_reduce each.
// AR-LABEL: func.func @apply_gradients(
// AR: %[[B:.*]] = mega.concat %{{.*}} axis 0 : (tensor<128xf32>, tensor<32xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<176xf32>
// AR-NEXT: mega.all_reduce sum %[[B]] on #mesh axes ["dp"] : tensor<176xf32>
// AR: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<144xf32>
// AR: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<160xf32>
// AR: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<256xf32>
// AR: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<32xf32>
// AR: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<256xf32>
// AR: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<24xf32>
// AR-NOT: mega.all_reduce
// AR-NOT: mega.reduce_scatter
// AR: return

// The default (Megatron's max(40M, 1M x dp) elements): one bucket of all 1048 elements.
// DEFAULT-LABEL: func.func @apply_gradients(
// DEFAULT: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<1048xf32> -> tensor<524xf32>
// DEFAULT-NOT: mega.reduce_scatter
// DEFAULT: mega.all_gather %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<524xf32> -> tensor<1048xf32>
// DEFAULT-NOT: mega.all_gather

// Sequence parallel (tp 2): the norm weights' gradients are partial over dp and tp. They share
// a bucket's reduce_scatter over dp with tp-split tensors, and each is then all-reduced over tp
// on its own, as without buckets. wpe's gradient is complete (no grad_partial): in no bucket.
// SP-LABEL: func.func @apply_gradients(
// SP: mega.reduce_scatter sum %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
// SP: %[[M:.*]] = mega.concat %{{.*}} axis 1 : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x16xf32>, tensor<2x2xf32>) -> tensor<2x26xf32>
// SP-NEXT: %[[F:.*]] = mega.reshape %[[M]] : tensor<2x26xf32> -> tensor<52xf32>
// SP-NEXT: %[[R:.*]] = mega.reduce_scatter sum %[[F]] on #mesh axes ["dp"] dim 0 : tensor<52xf32> -> tensor<26xf32>
// SP-NEXT: %[[LNW:.*]] = mega.slice %[[R]] [0] to [4] step [1] : tensor<26xf32> -> tensor<4xf32>
// SP-NEXT: %[[LNB:.*]] = mega.slice %[[R]] [4] to [8] step [1] : tensor<26xf32> -> tensor<4xf32>
// SP: mega.all_reduce sum %[[LNW]] on #mesh axes ["tp"] : tensor<4xf32>
// SP-NEXT: mega.all_reduce sum %[[LNB]] on #mesh axes ["tp"] : tensor<4xf32>

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
