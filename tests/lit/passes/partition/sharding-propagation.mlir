// mega-sharding-propagation on a one-layer GPT (megac import --model
// gpt:layers=1,hidden=8,heads=2,seq=4,vocab=16,batch=4, inline below): Megatron's layouts as
// #mega.sharding encodings.
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2 dp=2" | FileCheck %s
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=2" | FileCheck %s --check-prefix=TP
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" | FileCheck %s --check-prefix=DP
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="pp=2" | FileCheck %s --check-prefix=PP

// tp=2 dp=2: the mesh; @forward (evaluation, one rank) is dropped.
// CHECK: #mesh = #mega.mesh<pp = 1, dp = 2, tp = 2>
// CHECK: module attributes {mega.mesh = #mesh
// CHECK-NOT: func.func @forward(
// CHECK-LABEL: func.func @forward_backward(
// Data inputs split on the batch dim over dp; the loss normalizer (0-d) stays whole.
// CHECK-SAME: %[[IDS:arg[0-9]+]]: tensor<4x4xi64, #mega.sharding<#mesh, {{\[\[}}dp], []]>> {mega.input = "input_ids"}
// Vocab-parallel embedding table (tied with the head).
// CHECK-SAME: %[[WTE:arg[0-9]+]]: tensor<16x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {{[^}]*}}mega.param = "wte"}
// Positions, norms: replicated (no encoding).
// CHECK-SAME: %[[WPE:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.param = "wpe"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.param = "h0.ln1.weight"}
// Column-parallel q/k/v weights and biases.
// CHECK-SAME: %[[QW:arg[0-9]+]]: tensor<8x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {{[^}]*}}mega.param = "h0.attn.q.weight"}
// CHECK-SAME: %[[QB:arg[0-9]+]]: tensor<8xf32, #mega.sharding<#mesh, {{\[\[}}tp]]>> {{[^}]*}}mega.param = "h0.attn.q.bias"}
// CHECK-SAME: tensor<8x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {{[^}]*}}mega.param = "h0.attn.k.weight"}
// CHECK-SAME: tensor<8xf32, #mega.sharding<#mesh, {{\[\[}}tp]]>> {{[^}]*}}mega.param = "h0.attn.k.bias"}
// CHECK-SAME: tensor<8x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {{[^}]*}}mega.param = "h0.attn.v.weight"}
// CHECK-SAME: tensor<8xf32, #mega.sharding<#mesh, {{\[\[}}tp]]>> {{[^}]*}}mega.param = "h0.attn.v.bias"}
// Row-parallel out-projection; its bias stays whole (added once, after the reduction).
// CHECK-SAME: %[[PW:arg[0-9]+]]: tensor<8x8xf32, #mega.sharding<#mesh, {{\[\[}}], [tp]]>> {{[^}]*}}mega.param = "h0.attn.proj.weight"}
// CHECK-SAME: %[[PB:arg[0-9]+]]: tensor<8xf32> {{[^}]*}}mega.param = "h0.attn.proj.bias"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.param = "h0.ln2.weight"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.param = "h0.ln2.bias"}
// MLP: fc1 column parallel, fc2 row parallel.
// CHECK-SAME: %[[FW:arg[0-9]+]]: tensor<32x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {{[^}]*}}mega.param = "h0.mlp.fc.weight"}
// CHECK-SAME: tensor<32xf32, #mega.sharding<#mesh, {{\[\[}}tp]]>> {{[^}]*}}mega.param = "h0.mlp.fc.bias"}
// CHECK-SAME: %[[F2W:arg[0-9]+]]: tensor<8x32xf32, #mega.sharding<#mesh, {{\[\[}}], [tp]]>> {{[^}]*}}mega.param = "h0.mlp.proj.weight"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.param = "h0.mlp.proj.bias"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.param = "ln_f.weight"}
// CHECK-SAME: tensor<8xf32> {{[^}]*}}mega.param = "ln_f.bias"}
// CHECK-SAME: %[[LABELS:arg[0-9]+]]: tensor<4x4xi64, #mega.sharding<#mesh, {{\[\[}}dp], []]>> {mega.input = "labels"}
// CHECK-SAME: %[[NORM:arg[0-9]+]]: tensor<f32> {mega.input = "loss_normalizer"}
// CHECK-SAME: -> (tensor<f32> {mega.output = "loss"})
// The vocab-parallel embedding gives a partial sum over tp, made whole before the residual add.
// CHECK: %[[E:.*]] = mega.embedding %[[WTE]][%[[IDS]]] : {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []], partial = sum(tp)>>
// CHECK: %[[P:.*]] = mega.broadcast %[[WPE]] : tensor<4x8xf32> -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// CHECK: %[[EW:.*]] = mega.reshard %[[E]] : tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []], partial = sum(tp)>> -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// CHECK: %[[X0:.*]] = mega.add %[[EW]], %[[P]] : tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// CHECK: %[[LN1:.*]] = mega.layer_norm %[[X0]], {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// Column-parallel q: the output is split on its feature dim, the heads on tp.
// CHECK: %[[Q:.*]] = mega.linear %[[LN1]], %[[QW]], %[[QB]] : {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], [tp]]>>
// CHECK: mega.reshape %[[Q]] : {{.*}} -> tensor<4x4x2x4xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], [tp], []]>>
// CHECK: %[[ATT:.*]] = mega.attention {{.*}} causal : {{.*}} -> tensor<4x4x2x4xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], [tp], []]>>
// CHECK: %[[Y:.*]] = mega.reshape %[[ATT]] : {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], [tp]]>>
// Row-parallel out-projection: a partial sum over tp; the bias is split off and added after
// the reshard, which happens before the residual add.
// CHECK: %[[O:.*]] = mega.linear %[[Y]], %[[PW]] : {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []], partial = sum(tp)>>
// CHECK: %[[OB:.*]] = mega.broadcast %[[PB]] : tensor<8xf32> -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// CHECK: %[[OW:.*]] = mega.reshard %[[O]] : tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []], partial = sum(tp)>> -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// CHECK: %[[OSUM:.*]] = mega.add %[[OW]], %[[OB]]
// CHECK: %[[X1:.*]] = mega.add %[[X0]], %[[OSUM]] : tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// CHECK: %[[LN2:.*]] = mega.layer_norm %[[X1]]
// CHECK: %[[H:.*]] = mega.linear %[[LN2]], %[[FW]], %{{.*}} : {{.*}} -> tensor<4x4x32xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], [tp]]>>
// CHECK: %[[G:.*]] = mega.gelu none %[[H]] : tensor<4x4x32xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], [tp]]>>
// CHECK: %[[M:.*]] = mega.linear %[[G]], %[[F2W]] : {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []], partial = sum(tp)>>
// CHECK: %[[MW:.*]] = mega.reshard %[[M]] : {{.*}}partial = sum(tp)>> -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// CHECK: %[[MSUM:.*]] = mega.add %[[MW]], %{{.*}}
// CHECK: %[[X2:.*]] = mega.add %[[X1]], %[[MSUM]]
// CHECK: %[[LNF:.*]] = mega.layer_norm %[[X2]]
// The tied head is vocab parallel: logits split on the vocab dim, cross-entropy over the split.
// CHECK: %[[Z:.*]] = mega.linear %[[LNF]], %[[WTE]] : {{.*}} -> tensor<4x4x16xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], [tp]]>>
// CHECK: %[[CE:.*]] = mega.cross_entropy %[[Z]], %[[LABELS]] {ignore_index = -100 : i64} : {{.*}} -> tensor<4x4xf32, #mega.sharding<#mesh, {{\[\[}}dp], []]>>
// The batch sum is a partial sum over dp, made whole for the loss.
// CHECK: %[[S:.*]] = mega.reduce sum %[[CE]] over [0, 1] : {{.*}} -> tensor<f32, #mega.sharding<#mesh, [], partial = sum(dp)>>
// CHECK: %[[SW:.*]] = mega.reshard %[[S]] : tensor<f32, #mega.sharding<#mesh, [], partial = sum(dp)>> -> tensor<f32>
// CHECK: %[[L:.*]] = mega.mul %[[SW]], %[[NORM]] : tensor<f32>
// CHECK: return %[[L]] : tensor<f32>
// Exactly four reshards: embedding, two row-parallel linears, the loss.
// CHECK-NOT: mega.reshard

// tp only: no batch split, the same tensor-parallel layouts.
// TP: #mesh = #mega.mesh<pp = 1, dp = 1, tp = 2>
// TP-LABEL: func.func @forward_backward(
// TP-SAME: tensor<4x4xi64> {mega.input = "input_ids"}
// TP-SAME: tensor<16x8xf32, #mega.sharding<#mesh, {{\[\[}}tp], []]>> {{[^}]*}}mega.param = "wte"}
// TP-SAME: tensor<8x8xf32, #mega.sharding<#mesh, {{\[\[}}], [tp]]>> {{[^}]*}}mega.param = "h0.attn.proj.weight"}
// TP: mega.embedding {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}], [], []], partial = sum(tp)>>
// TP: mega.cross_entropy {{.*}} -> tensor<4x4xf32>
// TP: mega.reduce sum {{.*}} -> tensor<f32>
// TP-NEXT: mega.mul

// dp only: every parameter replicated; only the batch dim and the loss's partial sum carry axes.
// DP: #mesh = #mega.mesh<pp = 1, dp = 2, tp = 1>
// DP-LABEL: func.func @forward_backward(
// DP-NOT: {{\[tp\]|sum\(tp\)}}
// DP-SAME: tensor<4x4xi64, #mega.sharding<#mesh, {{\[\[}}dp], []]>> {mega.input = "input_ids"}, %{{.*}}: tensor<16x8xf32> {
// DP: mega.embedding {{.*}} -> tensor<4x4x8xf32, #mega.sharding<#mesh, {{\[\[}}dp], [], []]>>
// DP-NOT: {{\[tp\]|sum\(tp\)}}
// DP: mega.reduce sum {{.*}} -> tensor<f32, #mega.sharding<#mesh, [], partial = sum(dp)>>
// DP-NOT: {{\[tp\]|sum\(tp\)}}

// pp only: the mesh is recorded, nothing is split.
// PP: #mesh = #mega.mesh<pp = 2, dp = 1, tp = 1>
// PP-NOT: func.func @forward(
// PP-NOT: #mega.sharding
// PP-NOT: mega.reshard

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
