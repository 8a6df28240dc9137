// mega-sharding-propagation on a one-layer Llama-style decoder (what mega-input-raise makes of a
// Hugging Face LlamaForCausalLM export, shrunk): rope on q [b, h, s, d] and k [b, hk, s, d]
// keeps the heads split over tp, grouped-query attention splits its 2 kv heads, and the SwiGLU
// gate's silu is split like its column-parallel linear. tp = 4 does not divide the 2 kv heads:
// they are replicated (issue 18): the k and v projections stay whole, each kv head is repeated
// twice, and the 4 repeated heads split over tp like the 4 query heads (a local slice).
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2" | FileCheck %s
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=4" | FileCheck %s --check-prefix=TP4

// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: tensor<8x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {mega.param = "q"}
// CHECK-SAME: tensor<4x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {mega.param = "k"}
// CHECK-SAME: tensor<4x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {mega.param = "v"}
// CHECK-SAME: tensor<8x8xf32, #mega.sharding<#mesh, {{\[\[}}], [tp]]>> {mega.param = "o"}
// CHECK-SAME: tensor<16x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {mega.param = "gate"}
// CHECK-SAME: tensor<16x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {mega.param = "up"}
// CHECK-SAME: tensor<8x16xf32, #mega.sharding<#mesh, {{\[\[}}], [tp]]>> {mega.param = "down"}
// CHECK: mega.rope %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x4x4x2xf32, #mega.sharding<#mesh, {{\[\[}}], [tp], [], []]>>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<2x4x4x2xf32, #mega.sharding<#mesh, {{\[\[}}], [tp], [], []]>>
// CHECK-NEXT: mega.rope %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x2x4x2xf32, #mega.sharding<#mesh, {{\[\[}}], [tp], [], []]>>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<2x2x4x2xf32, #mega.sharding<#mesh, {{\[\[}}], [tp], [], []]>>
// CHECK-NOT: mega.reshard
// CHECK: mega.attention {{.*}} : (tensor<2x4x4x2xf32, #mega.sharding<#mesh, {{\[\[}}], [], [tp], []]>>, tensor<2x4x2x2xf32, #mega.sharding<#mesh, {{\[\[}}], [], [tp], []]>>, tensor<2x4x2x2xf32, #mega.sharding<#mesh, {{\[\[}}], [], [tp], []]>>)
// CHECK: mega.silu %{{.*}} : tensor<2x4x16xf32, #mega.sharding<#mesh, {{\[\[}}], [], [tp]]>>
// CHECK-NEXT: mega.mul %{{.*}}, %{{.*}} : tensor<2x4x16xf32, #mega.sharding<#mesh, {{\[\[}}], [], [tp]]>>

// TP4-LABEL: func.func @forward_backward(
// TP4-SAME: tensor<8x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {mega.param = "q"}
// TP4-SAME: tensor<4x8xf32> {mega.param = "k"}
// TP4-SAME: tensor<4x8xf32> {mega.param = "v"}
// TP4: %[[K:.*]] = mega.rope {{.*}} -> tensor<2x2x4x2xf32>
// TP4: %[[K1:.*]] = mega.reshape %{{.*}} : tensor<2x4x2x2xf32> -> tensor<2x4x2x1x2xf32>
// TP4-NEXT: %[[K2:.*]] = mega.broadcast %[[K1]] : tensor<2x4x2x1x2xf32> -> tensor<2x4x2x2x2xf32>
// TP4-NEXT: %[[K3:.*]] = mega.reshape %[[K2]] : tensor<2x4x2x2x2xf32> -> tensor<2x4x4x2xf32>
// TP4: %[[KS:.*]] = mega.reshard %[[K3]] : tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32, #mega.sharding<#mesh, {{\[\[}}], [], [tp], []]>>
// TP4: mega.attention %{{.*}}, %[[KS]], %{{.*}} causal : (tensor<2x4x4x2xf32, #mega.sharding<#mesh, {{\[\[}}], [], [tp], []]>>, tensor<2x4x4x2xf32, #mega.sharding<#mesh, {{\[\[}}], [], [tp], []]>>, tensor<2x4x4x2xf32, #mega.sharding<#mesh, {{\[\[}}], [], [tp], []]>>)

func.func @llama(%ids: tensor<2x4xi64> {mega.input = "input_ids"}, %wte: tensor<16x8xf32> {mega.param = "embed"}, %wq: tensor<8x8xf32> {mega.param = "q"}, %wk: tensor<4x8xf32> {mega.param = "k"}, %wv: tensor<4x8xf32> {mega.param = "v"}, %wo: tensor<8x8xf32> {mega.param = "o"}, %wg: tensor<16x8xf32> {mega.param = "gate"}, %wu: tensor<16x8xf32> {mega.param = "up"}, %wd: tensor<8x16xf32> {mega.param = "down"}, %wh: tensor<16x8xf32> {mega.param = "head"}) -> (tensor<2x4x16xf32> {mega.output = "logits"}) {
  %cos = mega.constant dense<0.5> : tensor<4x2xf32>
  %sin = mega.constant dense<0.25> : tensor<4x2xf32>
  %h = mega.embedding %wte[%ids] : tensor<16x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
  %q0 = mega.linear %h, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %q1 = mega.reshape %q0 : tensor<2x4x8xf32> -> tensor<2x4x4x2xf32>
  %q2 = mega.transpose %q1 [0, 2, 1, 3] : tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  %k0 = mega.linear %h, %wk : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  %k1 = mega.reshape %k0 : tensor<2x4x4xf32> -> tensor<2x4x2x2xf32>
  %k2 = mega.transpose %k1 [0, 2, 1, 3] : tensor<2x4x2x2xf32> -> tensor<2x2x4x2xf32>
  %v0 = mega.linear %h, %wv : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  %v1 = mega.reshape %v0 : tensor<2x4x4xf32> -> tensor<2x4x2x2xf32>
  %qr = mega.rope %q2, %cos, %sin : (tensor<2x4x4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<2x4x4x2xf32>
  %kr = mega.rope %k2, %cos, %sin : (tensor<2x2x4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<2x2x4x2xf32>
  %qt = mega.transpose %qr [0, 2, 1, 3] : tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  %kt = mega.transpose %kr [0, 2, 1, 3] : tensor<2x2x4x2xf32> -> tensor<2x4x2x2xf32>
  %o0 = mega.attention %qt, %kt, %v1 causal : (tensor<2x4x4x2xf32>, tensor<2x4x2x2xf32>, tensor<2x4x2x2xf32>) -> tensor<2x4x4x2xf32>
  %o1 = mega.reshape %o0 : tensor<2x4x4x2xf32> -> tensor<2x4x8xf32>
  %o2 = mega.linear %o1, %wo : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %r1 = mega.add %h, %o2 : tensor<2x4x8xf32>
  %g = mega.linear %r1, %wg : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %u = mega.linear %r1, %wu : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %sg = mega.silu %g : tensor<2x4x16xf32>
  %m = mega.mul %sg, %u : tensor<2x4x16xf32>
  %d = mega.linear %m, %wd : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
  %r2 = mega.add %r1, %d : tensor<2x4x8xf32>
  %logits = mega.linear %r2, %wh : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %logits : tensor<2x4x16xf32>
}
