// mega-context-parallel with ring=true (cp = 2; Megatron's cp_comm_type "p2p",
// --cp-comm-type p2p), then sharding propagation, spmdize and autodiff (dp = 2, cp = 2), on the
// one-layer GPT of context-parallel-cp.mlir. The key positions are the queries' (gathered by P,
// split over cp), the attention is marked mega.ring_axes = ["cp"], and its keys and values stay
// split with the queries: no all-gather over cp, each rank's attention (and attention_grad) holds
// its own block of 4 positions; codegen lowers them to RingAttention / RingAttentionGrad.
// RUN: megac-opt %s --mega-training-loss --mega-context-parallel="cp=2 ring=true" | FileCheck %s --check-prefix=PERM
// RUN: megac-opt %s --mega-training-loss --mega-context-parallel="cp=2 ring=true" --mega-sharding-propagation="dp=2 cp=2" --mega-spmdize --mega-training-autodiff | FileCheck %s

// PERM-LABEL: func.func @forward_backward(
// PERM: %[[IOTA:.*]] = mega.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : tensor<8xi64>
// PERM: %[[QPOS:.*]] = mega.gather %[[IOTA]][%{{.*}}] axis 0 {mega.cp_split} : tensor<8xi64>, tensor<8xi64> -> tensor<8xi64>
// PERM: mega.attention {{.*}} positions %[[QPOS]], %[[QPOS]] {mega.ring_axes = ["cp"]} : (tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>, tensor<8xi64>, tensor<8xi64>) -> tensor<2x8x2x8xf32>

// CHECK-LABEL: func.func @forward_backward(
// CHECK-NOT: mega.all_gather
// CHECK: %[[QPOS:.*]] = mega.gather %{{.*}}[%{{.*}}] axis 0 {mega.cp_split} : tensor<8xi64>, tensor<4xi64> -> tensor<4xi64>
// CHECK-NOT: mega.all_gather
// CHECK: mega.attention {{.*}} positions %[[QPOS]], %[[QPOS]] {mega.ring_axes = ["cp"]} : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<4xi64>, tensor<4xi64>) -> tensor<1x4x2x8xf32>
// CHECK-NOT: mega.all_gather
// CHECK: mega.attention_grad {{.*}} positions %[[QPOS]], %[[QPOS]] {mega.ring_axes = ["cp"]} : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<4xi64>, tensor<4xi64>) -> (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>)
// CHECK-NOT: mega.all_gather
// CHECK-NOT: mega.reduce_scatter {{.*}}["cp"]

// NOCP: mega.attention {{.*}} causal

module attributes {mega.model = "gpt:layers=1,hidden=16,heads=2,ffn=64,seq=8,vocab=32,batch=2,tied=1,gelu=erf,dtype=f32"} {
  func.func @gpt(%arg0: tensor<2x8xi64> {mega.input = "input_ids"}, %arg1: tensor<32x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wte"}, %arg2: tensor<8x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wpe"}, %arg3: tensor<16xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln1.weight"}, %arg4: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln1.bias"}, %arg5: tensor<16x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.q.weight"}, %arg6: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.q.bias"}, %arg7: tensor<16x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.k.weight"}, %arg8: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.k.bias"}, %arg9: tensor<16x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.v.weight"}, %arg10: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.v.bias"}, %arg11: tensor<16x16xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.attn.proj.weight"}, %arg12: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.proj.bias"}, %arg13: tensor<16xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln2.weight"}, %arg14: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln2.bias"}, %arg15: tensor<64x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.mlp.fc.weight"}, %arg16: tensor<64xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.fc.bias"}, %arg17: tensor<16x64xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.mlp.proj.weight"}, %arg18: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.proj.bias"}, %arg19: tensor<16xf32> {mega.init = #mega.init<ones>, mega.param = "ln_f.weight"}, %arg20: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "ln_f.bias"}) -> (tensor<2x8x32xf32> {mega.output = "logits"}) {
    %0 = mega.embedding %arg1[%arg0] : tensor<32x16xf32>, tensor<2x8xi64> -> tensor<2x8x16xf32>
    %1 = mega.broadcast %arg2 : tensor<8x16xf32> -> tensor<2x8x16xf32>
    %2 = mega.add %0, %1 : tensor<2x8x16xf32>
    %3 = mega.layer_norm %2, %arg3, %arg4 eps 1.000000e-05 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %4 = mega.linear %3, %arg5, %arg6 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %5 = mega.reshape %4 : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %6 = mega.linear %3, %arg7, %arg8 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %7 = mega.reshape %6 : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %8 = mega.linear %3, %arg9, %arg10 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %9 = mega.reshape %8 : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %10 = mega.attention %5, %7, %9 causal : (tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>) -> tensor<2x8x2x8xf32>
    %11 = mega.reshape %10 : tensor<2x8x2x8xf32> -> tensor<2x8x16xf32>
    %12 = mega.linear %11, %arg11, %arg12 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %13 = mega.add %2, %12 : tensor<2x8x16xf32>
    %14 = mega.layer_norm %13, %arg13, %arg14 eps 1.000000e-05 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %15 = mega.linear %14, %arg15, %arg16 : (tensor<2x8x16xf32>, tensor<64x16xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %16 = mega.gelu none %15 : tensor<2x8x64xf32>
    %17 = mega.linear %16, %arg17, %arg18 : (tensor<2x8x64xf32>, tensor<16x64xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %18 = mega.add %13, %17 : tensor<2x8x16xf32>
    %19 = mega.layer_norm %18, %arg19, %arg20 eps 1.000000e-05 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %20 = mega.linear %19, %arg1 : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    return %20 : tensor<2x8x32xf32>
  }
}
