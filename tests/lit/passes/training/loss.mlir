// mega-training-loss: the model becomes @forward and @forward_backward gains labels, the
// normalizer and the summed cross-entropy; mlm kind and ignore-index; rank-1 logits (one
// token). loss-named-logits.mlir picks the logits by name.
// RUN: megac-opt %s --mega-training-loss --split-input-file | FileCheck %s
// RUN: megac-opt %s --mega-training-loss="loss-kind=mlm ignore-index=0" --split-input-file | FileCheck %s --check-prefix=MLM

// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %{{.*}}: tensor<16x8xf32> {mega.param = "wte"}, %{{.*}}: tensor<2x4xi64> {mega.input = "input_ids"}) -> (tensor<2x4x16xf32> {mega.output = "logits"})
// CHECK-NEXT: mega.embedding
// CHECK-NEXT: mega.linear
// CHECK-NEXT: return
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[W:.*]]: tensor<16x8xf32> {mega.param = "wte"}, %[[IDS:.*]]: tensor<2x4xi64> {mega.input = "input_ids"}, %[[LABELS:.*]]: tensor<2x4xi64> {mega.input = "labels"}, %[[NORM:[a-z0-9]+]]: tensor<f32> {mega.input = "loss_normalizer"})
// CHECK-SAME: -> (tensor<f32> {mega.output = "loss"}) attributes {mega.loss_kind = "causal"}
// CHECK-NEXT: %[[H:.*]] = mega.embedding %[[W]][%[[IDS]]]
// CHECK-NEXT: %[[Z:.*]] = mega.linear %[[H]], %[[W]]
// CHECK-NEXT: %[[CE:.*]] = mega.cross_entropy %[[Z]], %[[LABELS]] {ignore_index = -100 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64> -> tensor<2x4xf32>
// CHECK-NEXT: %[[S:.*]] = mega.reduce sum %[[CE]] over [0, 1] : tensor<2x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[L:.*]] = mega.mul %[[S]], %[[NORM]] : tensor<f32>
// CHECK-NEXT: return %[[L]] : tensor<f32>
// MLM-LABEL: func.func @forward_backward(
// MLM-SAME: attributes {mega.loss_kind = "mlm"}
// MLM: mega.cross_entropy %{{.*}}, %{{.*}} {ignore_index = 0 : i64}
func.func @gpt(%wte: tensor<16x8xf32> {mega.param = "wte"}, %ids: tensor<2x4xi64> {mega.input = "input_ids"}) -> (tensor<2x4x16xf32> {mega.output = "logits"}) {
  %h = mega.embedding %wte[%ids] : tensor<16x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
  %z = mega.linear %h, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %z : tensor<2x4x16xf32>
}

// -----

// The model already called @forward, with one token (rank-1 logits, a 0-d label): no reduction.
// RUN: megac-opt %s --mega-training-loss --split-input-file | FileCheck %s --check-prefix=ONE
// ONE-LABEL: func.func @forward(%{{.*}}: tensor<7xf32>
// ONE-LABEL: func.func @forward_backward(
// ONE-SAME: %[[LABEL:[a-z0-9]+]]: tensor<i64> {mega.input = "labels"}, %[[NORM:[a-z0-9]+]]: tensor<f32> {mega.input = "loss_normalizer"})
// ONE-NEXT: %[[CE:.*]] = mega.cross_entropy %{{.*}}, %[[LABEL]] {ignore_index = -100 : i64} : tensor<7xf32>, tensor<i64> -> tensor<f32>
// ONE-NEXT: %[[L:.*]] = mega.mul %[[CE]], %[[NORM]] : tensor<f32>
// ONE-NEXT: return %[[L]]
func.func @forward(%z: tensor<7xf32> {mega.param = "z"}) -> tensor<7xf32> {
  return %z : tensor<7xf32>
}
