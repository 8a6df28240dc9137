// mega-input-raise's Llama-family patterns (passes/input/LlamaPatterns.cpp) on the forms a
// Hugging Face LlamaForCausalLM export imports as: SiLU, rotate_half rotary embeddings and the
// repeat_kv broadcast before grouped-query attention; their options; and near misses that must
// stay as they are.
// RUN: megac-opt %s --mega-input-raise --split-input-file | FileCheck %s
// RUN: megac-opt %s --mega-input-raise="silu=false rope=false gqa=false" --split-input-file | FileCheck %s --check-prefix=OFF

// SwiGLU MLP: silu(gate) * up; the product stays a mul.
// CHECK-LABEL: func.func @swiglu
// CHECK-SAME: (%[[G:[^:]*]]: tensor<2x4x8xf32>, %[[U:[^:]*]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[S:.*]] = mega.silu %[[G]] : tensor<2x4x8xf32>
// CHECK-NEXT: %[[Y:.*]] = mega.mul %[[S]], %[[U]] : tensor<2x4x8xf32>
// CHECK-NEXT: return %[[Y]]
// OFF-LABEL: func.func @swiglu
// OFF: mega.sigmoid
func.func @swiglu(%gate: tensor<2x4x8xf32>, %up: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %sg = mega.sigmoid %gate : tensor<2x4x8xf32>
  %a = mega.mul %gate, %sg : tensor<2x4x8xf32>
  %y = mega.mul %a, %up : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// sigmoid(x) * x: the other order.
// CHECK-LABEL: func.func @silu_swapped
// CHECK-NEXT: %[[S:.*]] = mega.silu %arg0 : tensor<3xf64>
// CHECK-NEXT: return %[[S]]
func.func @silu_swapped(%x: tensor<3xf64>) -> tensor<3xf64> {
  %sg = mega.sigmoid %x : tensor<3xf64>
  %a = mega.mul %sg, %x : tensor<3xf64>
  return %a : tensor<3xf64>
}

// -----

// A sigmoid of another value is a gate, not a SiLU.
// CHECK-LABEL: func.func @not_silu
// CHECK: mega.sigmoid
// CHECK-NOT: mega.silu
func.func @not_silu(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %sg = mega.sigmoid %y : tensor<3xf32>
  %a = mega.mul %x, %sg : tensor<3xf32>
  return %a : tensor<3xf32>
}

// -----

// Hugging Face's apply_rotary_pos_emb on q [b, h, s, d] with constant-folded tables
// [1, 1, s, d]: the broadcasts move into mega.rope.
// CHECK-LABEL: func.func @rope
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x4x3x8xf32>, %[[C:[^:]*]]: tensor<1x1x3x8xf32>, %[[S:[^:]*]]: tensor<1x1x3x8xf32>)
// CHECK-NEXT: %[[R:.*]] = mega.rope %[[X]], %[[C]], %[[S]] : (tensor<2x4x3x8xf32>, tensor<1x1x3x8xf32>, tensor<1x1x3x8xf32>) -> tensor<2x4x3x8xf32>
// CHECK-NEXT: return %[[R]]
// OFF-LABEL: func.func @rope
// OFF: mega.concat
func.func @rope(%x: tensor<2x4x3x8xf32>, %cos: tensor<1x1x3x8xf32>, %sin: tensor<1x1x3x8xf32>) -> tensor<2x4x3x8xf32> {
  %cb = mega.broadcast %cos : tensor<1x1x3x8xf32> -> tensor<2x4x3x8xf32>
  %xc = mega.mul %x, %cb : tensor<2x4x3x8xf32>
  %x1 = mega.slice %x [0, 0, 0, 0] to [2, 4, 3, 4] step [1, 1, 1, 1] : tensor<2x4x3x8xf32> -> tensor<2x4x3x4xf32>
  %x2 = mega.slice %x [0, 0, 0, 4] to [2, 4, 3, 8] step [1, 1, 1, 1] : tensor<2x4x3x8xf32> -> tensor<2x4x3x4xf32>
  %n = mega.neg %x2 : tensor<2x4x3x4xf32>
  %r = mega.concat %n, %x1 axis 3 : (tensor<2x4x3x4xf32>, tensor<2x4x3x4xf32>) -> tensor<2x4x3x8xf32>
  %sb = mega.broadcast %sin : tensor<1x1x3x8xf32> -> tensor<2x4x3x8xf32>
  %rs = mega.mul %r, %sb : tensor<2x4x3x8xf32>
  %y = mega.add %xc, %rs : tensor<2x4x3x8xf32>
  return %y : tensor<2x4x3x8xf32>
}

// -----

// Terms and factors in the other order, tables already of x's shape.
// CHECK-LABEL: func.func @rope_swapped
// CHECK-NEXT: %[[R:.*]] = mega.rope %arg0, %arg1, %arg2 : (tensor<2x6xf32>, tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
// CHECK-NEXT: return %[[R]]
func.func @rope_swapped(%x: tensor<2x6xf32>, %cos: tensor<2x6xf32>, %sin: tensor<2x6xf32>) -> tensor<2x6xf32> {
  %x1 = mega.slice %x [0, 0] to [2, 3] step [1, 1] : tensor<2x6xf32> -> tensor<2x3xf32>
  %x2 = mega.slice %x [0, 3] to [2, 6] step [1, 1] : tensor<2x6xf32> -> tensor<2x3xf32>
  %n = mega.neg %x2 : tensor<2x3xf32>
  %r = mega.concat %n, %x1 axis -1 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  %rs = mega.mul %sin, %r : tensor<2x6xf32>
  %xc = mega.mul %cos, %x : tensor<2x6xf32>
  %y = mega.add %rs, %xc : tensor<2x6xf32>
  return %y : tensor<2x6xf32>
}

// -----

// Near miss: the halves concatenated without the negation (not rotate_half).
// CHECK-LABEL: func.func @not_rope
// CHECK-NOT: mega.rope
// CHECK: mega.concat
func.func @not_rope(%x: tensor<2x6xf32>, %cos: tensor<2x6xf32>, %sin: tensor<2x6xf32>) -> tensor<2x6xf32> {
  %x1 = mega.slice %x [0, 0] to [2, 3] step [1, 1] : tensor<2x6xf32> -> tensor<2x3xf32>
  %x2 = mega.slice %x [0, 3] to [2, 6] step [1, 1] : tensor<2x6xf32> -> tensor<2x3xf32>
  %n = mega.neg %x1 : tensor<2x3xf32>
  %r = mega.concat %x2, %n axis 1 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  %rs = mega.mul %r, %sin : tensor<2x6xf32>
  %xc = mega.mul %x, %cos : tensor<2x6xf32>
  %y = mega.add %xc, %rs : tensor<2x6xf32>
  return %y : tensor<2x6xf32>
}

// -----

// repeat_kv: 2 kv heads repeated to 4 query heads before attention ([b, h, s, d] transposed to
// attention's [b, s, h, d]). Attention gets the 2-head key and value.
// CHECK-LABEL: func.func @gqa
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x4x3x8xf32>, %[[K:[^:]*]]: tensor<2x2x3x8xf32>, %[[V:[^:]*]]: tensor<2x2x3x8xf32>)
// CHECK-DAG: %[[QT:.*]] = mega.transpose %[[Q]] [0, 2, 1, 3] : tensor<2x4x3x8xf32> -> tensor<2x3x4x8xf32>
// CHECK-DAG: %[[KT:.*]] = mega.transpose %[[K]] [0, 2, 1, 3] : tensor<2x2x3x8xf32> -> tensor<2x3x2x8xf32>
// CHECK-DAG: %[[VT:.*]] = mega.transpose %[[V]] [0, 2, 1, 3] : tensor<2x2x3x8xf32> -> tensor<2x3x2x8xf32>
// CHECK: mega.attention %[[QT]], %[[KT]], %[[VT]] causal : (tensor<2x3x4x8xf32>, tensor<2x3x2x8xf32>, tensor<2x3x2x8xf32>) -> tensor<2x3x4x8xf32>
// CHECK-NOT: mega.broadcast
// OFF-LABEL: func.func @gqa
// OFF: mega.broadcast
// OFF: mega.attention {{.*}} : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>)
func.func @gqa(%q: tensor<2x4x3x8xf32>, %k: tensor<2x2x3x8xf32>, %v: tensor<2x2x3x8xf32>) -> tensor<2x3x4x8xf32> {
  %k5 = mega.reshape %k : tensor<2x2x3x8xf32> -> tensor<2x2x1x3x8xf32>
  %kb = mega.broadcast %k5 : tensor<2x2x1x3x8xf32> -> tensor<2x2x2x3x8xf32>
  %kr = mega.reshape %kb : tensor<2x2x2x3x8xf32> -> tensor<2x4x3x8xf32>
  %v5 = mega.reshape %v : tensor<2x2x3x8xf32> -> tensor<2x2x1x3x8xf32>
  %vb = mega.broadcast %v5 : tensor<2x2x1x3x8xf32> -> tensor<2x2x2x3x8xf32>
  %vr = mega.reshape %vb : tensor<2x2x2x3x8xf32> -> tensor<2x4x3x8xf32>
  %qt = mega.transpose %q [0, 2, 1, 3] : tensor<2x4x3x8xf32> -> tensor<2x3x4x8xf32>
  %kt = mega.transpose %kr [0, 2, 1, 3] : tensor<2x4x3x8xf32> -> tensor<2x3x4x8xf32>
  %vt = mega.transpose %vr [0, 2, 1, 3] : tensor<2x4x3x8xf32> -> tensor<2x3x4x8xf32>
  %o = mega.attention %qt, %kt, %vt causal : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %o : tensor<2x3x4x8xf32>
}

// -----

// Near miss: the heads repeated in the other order (tile, [b, 1, hk, ...]): head i would read
// kv head i % hk, not i / (h / hk); left alone.
// CHECK-LABEL: func.func @tiled_heads
// CHECK: mega.broadcast
// CHECK: mega.attention {{.*}} : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>)
func.func @tiled_heads(%q: tensor<2x3x4x8xf32>, %k: tensor<2x2x3x8xf32>) -> tensor<2x3x4x8xf32> {
  %k5 = mega.reshape %k : tensor<2x2x3x8xf32> -> tensor<2x1x2x3x8xf32>
  %kb = mega.broadcast %k5 : tensor<2x1x2x3x8xf32> -> tensor<2x2x2x3x8xf32>
  %kr = mega.reshape %kb : tensor<2x2x2x3x8xf32> -> tensor<2x4x3x8xf32>
  %kt = mega.transpose %kr [0, 2, 1, 3] : tensor<2x4x3x8xf32> -> tensor<2x3x4x8xf32>
  %o = mega.attention %q, %kt, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %o : tensor<2x3x4x8xf32>
}
