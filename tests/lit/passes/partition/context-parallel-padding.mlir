// mega-context-parallel (cp = 2) on padded inputs, then mega-sharding-propagation and
// mega-spmdize (dp = 2, cp = 2): a one-layer GPT with padding=1 (megac import --model
// gpt:layers=1,hidden=16,heads=2,seq=8,vocab=32,batch=2,padding=1 --compile-to=input, inline
// below), whose attention_mask [b, S] (1 token, 0 padding) becomes the additive key mask
// [b, 1, 1, S] (0 kept, -inf padding) of its causal attention. The pass reads attention_mask in
// the permuted order like the tokens (a gather by P = 0 1 6 7 2 3 4 5 split over cp), so the mask
// is computed per rank on its S / cp positions; the attention keeps the mask beside its query
// and key positions, and, since k and v are whole on their sequence dim, the key mask is
// all-gathered over cp with them (in the same permuted order). With the ring (ring=true) the
// key mask stays split with the keys: each rank's attention and attention_grad take its own
// block of it (the kernel passes it around the ring with k and v), and no all_gather is left.
// RUN: megac-opt %s --mega-training-loss --mega-context-parallel=cp=2 | FileCheck %s --check-prefix=PERM
// RUN: megac-opt %s --mega-training-loss --mega-context-parallel=cp=2 --mega-sharding-propagation="dp=2 cp=2" --mega-spmdize | FileCheck %s
// RUN: megac-opt %s --mega-training-loss --mega-context-parallel="cp=2 ring=true" --mega-sharding-propagation="dp=2 cp=2" --mega-spmdize --mega-training-autodiff | FileCheck %s --check-prefix=RING

// PERM-LABEL: func.func @forward_backward(
// PERM: %[[P:.*]] = mega.constant dense<[0, 1, 6, 7, 2, 3, 4, 5]> : tensor<8xi64>
// PERM: %[[KEEP:.*]] = mega.gather %arg1[%[[P]]] axis 1 {mega.cp_split} : tensor<2x8xi64>, tensor<8xi64> -> tensor<2x8xi64>
// PERM: %[[QPOS:.*]] = mega.gather %{{.*}}[%[[P]]] axis 0 {mega.cp_split} : tensor<8xi64>, tensor<8xi64> -> tensor<8xi64>
// PERM: %[[KPOS:.*]] = mega.constant dense<[0, 1, 6, 7, 2, 3, 4, 5]> : tensor<8xi64>
// PERM: %[[PAD:.*]] = mega.compare eq %[[KEEP]], %{{.*}} : tensor<2x8xi64>
// PERM: %[[ADD:.*]] = mega.where %[[PAD]], %{{.*}}, %{{.*}} : tensor<2x8xi1>, tensor<2x8xf32>
// PERM: %[[MASK:.*]] = mega.reshape %[[ADD]] : tensor<2x8xf32> -> tensor<2x1x1x8xf32>
// PERM: mega.attention %{{.*}}, %{{.*}}, %{{.*}} mask %[[MASK]] positions %[[QPOS]], %[[KPOS]] : (tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>, tensor<2x1x1x8xf32>, tensor<8xi64>, tensor<8xi64>) -> tensor<2x8x2x8xf32>

// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[KEEP:.*]] = mega.gather %arg1[%{{.*}}] axis 1 {mega.cp_split} : tensor<1x8xi64>, tensor<4xi64> -> tensor<1x4xi64>
// CHECK: mega.compare eq %[[KEEP]], %{{.*}} : tensor<1x4xi64>
// CHECK: %[[ADD:.*]] = mega.where %{{.*}} : tensor<1x4xi1>, tensor<1x4xf32>
// CHECK: %[[MASK:.*]] = mega.reshape %[[ADD]] : tensor<1x4xf32> -> tensor<1x1x1x4xf32>
// CHECK: mega.all_gather %{{.*}} on #mesh axes ["cp"] dim 1 grad_partial : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
// CHECK: mega.all_gather %{{.*}} on #mesh axes ["cp"] dim 1 grad_partial : tensor<1x4x2x8xf32> -> tensor<1x8x2x8xf32>
// CHECK: %[[WHOLE:.*]] = mega.all_gather %[[MASK]] on #mesh axes ["cp"] dim 3 {{.*}}: tensor<1x1x1x4xf32> -> tensor<1x1x1x8xf32>
// CHECK: mega.attention %{{.*}}, %{{.*}}, %{{.*}} mask %[[WHOLE]] positions %{{.*}}, %{{.*}} : (tensor<1x4x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x1x1x8xf32>, tensor<4xi64>, tensor<8xi64>) -> tensor<1x4x2x8xf32>

// RING-LABEL: func.func @forward_backward(
// RING-NOT: mega.all_gather
// RING: %[[MASK:.*]] = mega.reshape %{{.*}} : tensor<1x4xf32> -> tensor<1x1x1x4xf32>
// RING-NOT: mega.all_gather
// RING: mega.attention %{{.*}}, %{{.*}}, %{{.*}} mask %[[MASK]] positions %[[POS:.*]], %[[POS]] {mega.ring_axes = ["cp"]} : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x1x1x4xf32>, tensor<4xi64>, tensor<4xi64>) -> tensor<1x4x2x8xf32>
// RING-NOT: mega.all_gather
// RING: mega.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} mask %[[MASK]] positions %[[POS]], %[[POS]] {mega.ring_axes = ["cp"]} : {{.*}} -> (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x1x1x4xf32>)

module attributes {mega.model = "gpt:layers=1,hidden=16,heads=2,ffn=64,seq=8,vocab=32,batch=2,tied=1,gelu=erf,padding=1,dtype=f32"} {
  func.func @gpt(%arg0: tensor<2x8xi64> {mega.input = "input_ids"}, %arg1: tensor<2x8xi64> {mega.input = "attention_mask"}, %arg2: tensor<32x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wte"}, %arg3: tensor<8x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wpe"}, %arg4: tensor<16xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln1.weight"}, %arg5: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln1.bias"}, %arg6: tensor<16x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.q.weight"}, %arg7: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.q.bias"}, %arg8: tensor<16x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.k.weight"}, %arg9: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.k.bias"}, %arg10: tensor<16x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.v.weight"}, %arg11: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.v.bias"}, %arg12: tensor<16x16xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.attn.proj.weight"}, %arg13: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.proj.bias"}, %arg14: tensor<16xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln2.weight"}, %arg15: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln2.bias"}, %arg16: tensor<64x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.mlp.fc.weight"}, %arg17: tensor<64xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.fc.bias"}, %arg18: tensor<16x64xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.mlp.proj.weight"}, %arg19: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.proj.bias"}, %arg20: tensor<16xf32> {mega.init = #mega.init<ones>, mega.param = "ln_f.weight"}, %arg21: tensor<16xf32> {mega.init = #mega.init<zeros>, mega.param = "ln_f.bias"}) -> (tensor<2x8x32xf32> {mega.output = "logits"}) {
    %0 = mega.constant dense<0xFF800000> : tensor<2x8xf32>
    %1 = mega.constant dense<0.000000e+00> : tensor<2x8xf32>
    %2 = mega.constant dense<0> : tensor<2x8xi64>
    %3 = mega.compare eq %arg1, %2 : tensor<2x8xi64>
    %4 = mega.where %3, %0, %1 : tensor<2x8xi1>, tensor<2x8xf32>
    %5 = mega.reshape %4 : tensor<2x8xf32> -> tensor<2x1x1x8xf32>
    %6 = mega.embedding %arg2[%arg0] : tensor<32x16xf32>, tensor<2x8xi64> -> tensor<2x8x16xf32>
    %7 = mega.broadcast %arg3 : tensor<8x16xf32> -> tensor<2x8x16xf32>
    %8 = mega.add %6, %7 : tensor<2x8x16xf32>
    %9 = mega.layer_norm %8, %arg4, %arg5 eps 1.000000e-05 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %10 = mega.linear %9, %arg6, %arg7 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %11 = mega.reshape %10 : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %12 = mega.linear %9, %arg8, %arg9 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %13 = mega.reshape %12 : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %14 = mega.linear %9, %arg10, %arg11 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %15 = mega.reshape %14 : tensor<2x8x16xf32> -> tensor<2x8x2x8xf32>
    %16 = mega.attention %11, %13, %15 mask %5 causal : (tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x8x2x8xf32>
    %17 = mega.reshape %16 : tensor<2x8x2x8xf32> -> tensor<2x8x16xf32>
    %18 = mega.linear %17, %arg12, %arg13 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %19 = mega.add %8, %18 : tensor<2x8x16xf32>
    %20 = mega.layer_norm %19, %arg14, %arg15 eps 1.000000e-05 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %21 = mega.linear %20, %arg16, %arg17 : (tensor<2x8x16xf32>, tensor<64x16xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %22 = mega.gelu none %21 : tensor<2x8x64xf32>
    %23 = mega.linear %22, %arg18, %arg19 : (tensor<2x8x64xf32>, tensor<16x64xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %24 = mega.add %19, %23 : tensor<2x8x16xf32>
    %25 = mega.layer_norm %24, %arg20, %arg21 eps 1.000000e-05 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %26 = mega.linear %25, %arg2 : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    return %26 : tensor<2x8x32xf32>
  }
}
