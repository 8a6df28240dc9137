// RUN: megac-opt %s | FileCheck %s
// RUN: megac-opt %s | megac-opt | FileCheck %s
// Round trip of the coarse ops: embedding, layer_norm, rms_norm, attention, gelu, silu, rope,
// cross_entropy, dropout (linear is in linear.mlir; a sharded one is here).

// CHECK-LABEL: func.func @embedding
// CHECK: mega.embedding %arg0[%arg1] : tensor<128x64xf32>, tensor<2x8xi64> -> tensor<2x8x64xf32>
// CHECK: mega.embedding %arg2[%arg3] : tensor<50x16xbf16>, tensor<7xi32> -> tensor<7x16xbf16>
func.func @embedding(%wte: tensor<128x64xf32>, %ids: tensor<2x8xi64>, %t: tensor<50x16xbf16>, %i: tensor<7xi32>) {
  %0 = mega.embedding %wte[%ids] : tensor<128x64xf32>, tensor<2x8xi64> -> tensor<2x8x64xf32>
  %1 = mega.embedding %t[%i] : tensor<50x16xbf16>, tensor<7xi32> -> tensor<7x16xbf16>
  return
}

// With and without bias; eps is printed as the nearest double (1.0e-06 as 9.99...E-7).
// CHECK-LABEL: func.func @layer_norm
// CHECK: mega.layer_norm %arg0, %arg1, %arg2 eps 1.000000e-05 : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
// CHECK: mega.layer_norm %arg0, %arg1 eps 9.9999999999999995E-7 : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
// CHECK: mega.layer_norm %arg3, %arg4 eps 1.000000e-05 : (tensor<4x32xbf16>, tensor<32xf32>) -> tensor<4x32xbf16>
func.func @layer_norm(%x: tensor<2x8x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>, %h: tensor<4x32xbf16>, %g2: tensor<32xf32>) {
  %0 = mega.layer_norm %x, %g, %b eps 1.0e-05 : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %1 = mega.layer_norm %x, %g eps 1.0e-06 : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  // bf16 activations with an f32 weight.
  %2 = mega.layer_norm %h, %g2 eps 1.0e-05 : (tensor<4x32xbf16>, tensor<32xf32>) -> tensor<4x32xbf16>
  return
}

// CHECK-LABEL: func.func @rms_norm
// CHECK: mega.rms_norm %arg0, %arg1 eps 9.9999999999999995E-7 : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
// CHECK: mega.rms_norm %arg2, %arg3 eps 9.9999999999999995E-8 : (tensor<16xf64>, tensor<16xf64>) -> tensor<16xf64>
func.func @rms_norm(%x: tensor<2x8x64xf32>, %g: tensor<64xf32>, %d: tensor<16xf64>, %gd: tensor<16xf64>) {
  %0 = mega.rms_norm %x, %g eps 1.0e-06 : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %1 = mega.rms_norm %d, %gd eps 1.0e-07 : (tensor<16xf64>, tensor<16xf64>) -> tensor<16xf64>
  return
}

// CHECK-LABEL: func.func @attention
// CHECK: mega.attention %arg0, %arg1, %arg2 : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
// CHECK: mega.attention %arg0, %arg1, %arg2 causal : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
// CHECK: mega.attention %arg0, %arg1, %arg2 mask %arg3 : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>) -> tensor<2x8x4x16xf32>
// CHECK: mega.attention %arg0, %arg1, %arg2 mask %arg3 causal {scale = 1.250000e-01 : f64} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>) -> tensor<2x8x4x16xf32>
func.func @attention(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>, %m: tensor<2x1x1x8xf32>) {
  %0 = mega.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  %1 = mega.attention %q, %k, %v causal : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  %2 = mega.attention %q, %k, %v mask %m : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>) -> tensor<2x8x4x16xf32>
  %3 = mega.attention %q, %k, %v mask %m causal {scale = 0.125 : f64} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>) -> tensor<2x8x4x16xf32>
  return
}

// Causal by global positions (context parallelism): 4 queries at positions [4] against 8 keys
// at positions [8], i64, instead of `causal` and a mask.
// CHECK-LABEL: func.func @attention_positions
// CHECK: mega.attention %arg0, %arg1, %arg1 positions %arg2, %arg3 : (tensor<2x4x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<4xi64>, tensor<8xi64>) -> tensor<2x4x4x16xf32>
func.func @attention_positions(%q: tensor<2x4x4x16xf32>, %kv: tensor<2x8x4x16xf32>, %qp: tensor<4xi64>, %kp: tensor<8xi64>) {
  %0 = mega.attention %q, %kv, %kv positions %qp, %kp : (tensor<2x4x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<4xi64>, tensor<8xi64>) -> tensor<2x4x4x16xf32>
  return
}

// Grouped-query attention: 8 query heads share 2 key/value heads; the key/value sequence
// (12) differs from the query's (4), and value head_dim (32) from query/key's (16).
// CHECK-LABEL: func.func @attention_gqa
// CHECK: mega.attention %arg0, %arg1, %arg2 causal : (tensor<1x4x8x16xbf16>, tensor<1x12x2x16xbf16>, tensor<1x12x2x32xbf16>) -> tensor<1x4x8x32xbf16>
// CHECK: mega.attention %arg0, %arg1, %arg2 mask %arg3 : (tensor<1x4x8x16xbf16>, tensor<1x12x2x16xbf16>, tensor<1x12x2x32xbf16>, tensor<4x12xbf16>) -> tensor<1x4x8x32xbf16>
func.func @attention_gqa(%q: tensor<1x4x8x16xbf16>, %k: tensor<1x12x2x16xbf16>, %v: tensor<1x12x2x32xbf16>, %bias: tensor<4x12xbf16>) {
  %0 = mega.attention %q, %k, %v causal : (tensor<1x4x8x16xbf16>, tensor<1x12x2x16xbf16>, tensor<1x12x2x32xbf16>) -> tensor<1x4x8x32xbf16>
  // A [s, t] mask broadcasts to [b, h, s, t].
  %1 = mega.attention %q, %k, %v mask %bias : (tensor<1x4x8x16xbf16>, tensor<1x12x2x16xbf16>, tensor<1x12x2x32xbf16>, tensor<4x12xbf16>) -> tensor<1x4x8x32xbf16>
  return
}

// CHECK-LABEL: func.func @gelu
// CHECK: mega.gelu none %arg0 : tensor<2x8x256xf32>
// CHECK: mega.gelu tanh %arg1 : tensor<2x8x256xf16>
func.func @gelu(%x: tensor<2x8x256xf32>, %h: tensor<2x8x256xf16>) {
  %0 = mega.gelu none %x : tensor<2x8x256xf32>
  %1 = mega.gelu tanh %h : tensor<2x8x256xf16>
  return
}

// CHECK-LABEL: func.func @silu
// CHECK: mega.silu %arg0 : tensor<2x8x256xf32>
// CHECK: mega.silu %arg1 : tensor<2x8x256xbf16>
func.func @silu(%x: tensor<2x8x256xf32>, %h: tensor<2x8x256xbf16>) {
  %0 = mega.silu %x : tensor<2x8x256xf32>
  %1 = mega.silu %h : tensor<2x8x256xbf16>
  return
}

// CHECK-LABEL: func.func @rope
// CHECK: mega.rope %arg0, %arg1, %arg1 : (tensor<2x4x16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16x8xf32>
// CHECK: mega.rope %arg0, %arg2, %arg3 : (tensor<2x4x16x8xf32>, tensor<2x1x16x8xf32>, tensor<2x1x16x8xf32>) -> tensor<2x4x16x8xf32>
func.func @rope(%x: tensor<2x4x16x8xf32>, %t: tensor<16x8xf32>, %c: tensor<2x1x16x8xf32>, %s: tensor<2x1x16x8xf32>) {
  %0 = mega.rope %x, %t, %t : (tensor<2x4x16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16x8xf32>
  %1 = mega.rope %x, %c, %s : (tensor<2x4x16x8xf32>, tensor<2x1x16x8xf32>, tensor<2x1x16x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// CHECK-LABEL: func.func @cross_entropy
// CHECK: mega.cross_entropy %arg0, %arg1 : tensor<2x8x128xf32>, tensor<2x8xi64> -> tensor<2x8xf32>
// CHECK: mega.cross_entropy %arg0, %arg1 {ignore_index = -100 : i64} : tensor<2x8x128xf32>, tensor<2x8xi64> -> tensor<2x8xf32>
// CHECK: mega.cross_entropy %arg2, %arg3 : tensor<128xbf16>, tensor<i32> -> tensor<bf16>
func.func @cross_entropy(%logits: tensor<2x8x128xf32>, %labels: tensor<2x8xi64>, %one: tensor<128xbf16>, %label: tensor<i32>) {
  %0 = mega.cross_entropy %logits, %labels : tensor<2x8x128xf32>, tensor<2x8xi64> -> tensor<2x8xf32>
  %1 = mega.cross_entropy %logits, %labels {ignore_index = -100 : i64} : tensor<2x8x128xf32>, tensor<2x8xi64> -> tensor<2x8xf32>
  %2 = mega.cross_entropy %one, %label : tensor<128xbf16>, tensor<i32> -> tensor<bf16>
  return
}

// CHECK-LABEL: func.func @dropout
// CHECK: mega.dropout %arg0, %arg1 ratio 1.000000e-01 stream 3 : tensor<2x8x64xf32>, tensor<i64>
// CHECK: mega.dropout %arg0, %arg1 ratio 0.000000e+00 stream 0 : tensor<2x8x64xf32>, tensor<i64>
func.func @dropout(%x: tensor<2x8x64xf32>, %seed: tensor<i64>) {
  %0 = mega.dropout %x, %seed ratio 1.0e-01 stream 3 : tensor<2x8x64xf32>, tensor<i64>
  %1 = mega.dropout %x, %seed ratio 0.0 stream 0 : tensor<2x8x64xf32>, tensor<i64>
  return
}

// Megatron's column-parallel MLP input: the weight split on out over tp gives an output split
// on its last dim; shapes stay global.
// CHECK-LABEL: func.func @sharded_linear
// CHECK{LITERAL}: mega.linear %arg0, %arg1, %arg2 : (tensor<8x64xf32, #mega.sharding<#mesh, [[dp], []]>>, tensor<256x64xf32, #mega.sharding<#mesh, [[tp], []]>>, tensor<256xf32, #mega.sharding<#mesh, [[tp]]>>) -> tensor<8x256xf32, #mega.sharding<#mesh, [[dp], [tp]]>>
func.func @sharded_linear(%x: tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], []]>>,
                          %w: tensor<256x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[tp], []]>>,
                          %b: tensor<256xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[tp]]>>) {
  %0 = mega.linear %x, %w, %b : (tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], []]>>, tensor<256x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[tp], []]>>, tensor<256xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[tp]]>>) -> tensor<8x256xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>
  return
}
