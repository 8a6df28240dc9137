// mega-split-fused-projections (issue 18): GPT-2's fused c_attn (a Conv1D weight [in, 3h],
// transposed at its use, a bias [3h]; the output reshaped and cut into q | k | v) becomes three
// linears reading parts of the same parameters, which gain the part dim ([in, 3, h], [3, h]) and
// record the shape the ONNX file holds. Under tp 2 the parts split by heads like ordinary
// column-parallel linears: no all-gather of the projection's output anywhere in the step.
// RUN: megac-opt %s --mega-split-fused-projections | FileCheck %s
// RUN: megac-opt %s --mega-split-fused-projections --mega-training-loss --mega-sharding-propagation="tp=2" --mega-spmdize | FileCheck %s --check-prefix=TP
// RUN: megac-opt %s --mega-split-fused-projections --mega-training-loss --mega-sharding-propagation="tp=2" --mega-spmdize --cse --mega-training-autodiff | FileCheck %s --check-prefix=STEP

// CHECK-LABEL: func.func @gpt2_attention(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<8x3x8xf32> {mega.param = "c_attn.weight", mega.source_shape = array<i64: 8, 24>}
// CHECK-SAME: %[[B:[a-z0-9]+]]: tensor<3x8xf32> {mega.param = "c_attn.bias", mega.source_shape = array<i64: 24>}
// CHECK: %[[W0:.*]] = mega.slice %[[W]] [0, 0, 0] to [8, 1, 8] step [1, 1, 1] : tensor<8x3x8xf32> -> tensor<8x1x8xf32>
// CHECK-NEXT: %[[W1:.*]] = mega.reshape %[[W0]] : tensor<8x1x8xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[WT:.*]] = mega.transpose %[[W1]] [1, 0] : tensor<8x8xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[B0:.*]] = mega.slice %[[B]] [0, 0] to [1, 8] step [1, 1] : tensor<3x8xf32> -> tensor<1x8xf32>
// CHECK-NEXT: %[[B1:.*]] = mega.reshape %[[B0]] : tensor<1x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[Q:.*]] = mega.linear %{{.*}}, %[[WT]], %[[B1]] : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: mega.reshape %[[Q]] : tensor<8x8xf32> -> tensor<2x4x8xf32>
// CHECK-COUNT-2: mega.linear
// CHECK-NOT: mega.slice %{{.*}} : tensor<2x4x24xf32>

// TP-LABEL: func.func @forward_backward(
// TP-SAME: tensor<8x3x4xf32> {mega.dim_axes = {{\[\[}}], [], ["tp"]], mega.global_shape = array<i64: 8, 3, 8>, mega.param = "c_attn.weight"
// TP-SAME: tensor<3x4xf32> {mega.dim_axes = {{\[\[}}], ["tp"]], mega.global_shape = array<i64: 3, 8>, mega.param = "c_attn.bias"
// TP-NOT: mega.all_gather
// TP: mega.attention {{.*}} : (tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>) -> tensor<2x4x1x4xf32>
// TP-NOT: mega.all_gather
// TP: return

// Backward: the three parts' input gradients are summed before one all-reduce (CSE shares the
// copy_to_shards of the norm's output), as for a fused projection.
// STEP-LABEL: func.func @forward_backward(
// STEP-NOT: mega.all_gather
// STEP: mega.copy_to_shards %{{.*}} : tensor<8x8xf32>
// STEP-NOT: mega.copy_to_shards %{{.*}} : tensor<8x8xf32>
// STEP-NOT: mega.all_gather
// STEP: return

module {
func.func @gpt2_attention(%ids: tensor<2x4xi64> {mega.input = "input_ids"}, %wte: tensor<16x8xf32> {mega.param = "wte"}, %w: tensor<8x24xf32> {mega.param = "c_attn.weight"}, %b: tensor<24xf32> {mega.param = "c_attn.bias"}, %wo: tensor<8x8xf32> {mega.param = "c_proj.weight"}, %g: tensor<8xf32> {mega.param = "ln.weight"}, %beta: tensor<8xf32> {mega.param = "ln.bias"}) -> (tensor<2x4x16xf32> {mega.output = "logits"}) {
  %h = mega.embedding %wte[%ids] : tensor<16x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
  %n = mega.layer_norm %h, %g, %beta eps 1.0e-05 : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %x = mega.reshape %n : tensor<2x4x8xf32> -> tensor<8x8xf32>
  %wt = mega.transpose %w [1, 0] : tensor<8x24xf32> -> tensor<24x8xf32>
  %y = mega.linear %x, %wt, %b : (tensor<8x8xf32>, tensor<24x8xf32>, tensor<24xf32>) -> tensor<8x24xf32>
  %y3 = mega.reshape %y : tensor<8x24xf32> -> tensor<2x4x24xf32>
  %q = mega.slice %y3 [0, 0, 0] to [2, 4, 8] step [1, 1, 1] : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  %k = mega.slice %y3 [0, 0, 8] to [2, 4, 16] step [1, 1, 1] : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  %v = mega.slice %y3 [0, 0, 16] to [2, 4, 24] step [1, 1, 1] : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  %qh = mega.reshape %q : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %kh = mega.reshape %k : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %vh = mega.reshape %v : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %o = mega.attention %qh, %kh, %vh causal : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> tensor<2x4x2x4xf32>
  %o1 = mega.reshape %o : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %wot = mega.transpose %wo [1, 0] : tensor<8x8xf32> -> tensor<8x8xf32>
  %p = mega.linear %o1, %wot : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %r = mega.add %h, %p : tensor<2x4x8xf32>
  %logits = mega.linear %r, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %logits : tensor<2x4x16xf32>
}
}
