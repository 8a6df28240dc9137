// mega-training-multi-tensor-optimizer: @apply_gradients' adamw_update ops that share dtypes, lr,
// step, betas and eps become one adamw_update_multi (own weight decay each), at the last of them.
// RUN: megac-opt %s --split-input-file --mega-training-optimizer --mega-training-multi-tensor-optimizer | FileCheck %s
// RUN: megac-opt %s --split-input-file --mega-training-optimizer="clip-grad=1.5" --mega-training-multi-tensor-optimizer | FileCheck %s --check-prefix=CLIP

// CHECK-LABEL: func.func @apply_gradients(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x3xf32> {{.*}}mega.param = "w"}, %[[B:[a-z0-9]+]]: tensor<4xf32> {{.*}}mega.param = "b"},
// CHECK-SAME: %[[GW:[a-z0-9]+]]: tensor<4x3xf32> {mega.state = "grad.w"}, %[[GB:[a-z0-9]+]]: tensor<4xf32> {mega.state = "grad.b"},
// CHECK-SAME: %[[MW:[a-z0-9]+]]: tensor<4x3xf32> {mega.state = "adam.m.w"}, %[[MB:[a-z0-9]+]]: tensor<4xf32> {mega.state = "adam.m.b"},
// CHECK-SAME: %[[VW:[a-z0-9]+]]: tensor<4x3xf32> {mega.state = "adam.v.w"}, %[[VB:[a-z0-9]+]]: tensor<4xf32> {mega.state = "adam.v.b"},
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {mega.input = "lr"}, %[[STEP:[a-z0-9]+]]: tensor<i64> {mega.input = "step"})
// CHECK-NEXT: %[[N:.*]] = mega.global_norm %[[GW]], %[[GB]]
// CHECK-NEXT: %[[U:.*]]:6 = mega.adamw_update_multi %[[LR]], %[[STEP]], %[[W]], %[[GW]], %[[MW]], %[[VW]], %[[B]], %[[GB]], %[[MB]], %[[VB]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, weight_decays = array<f64: 1.000000e-02, 0.000000e+00>}
// CHECK-SAME: : (tensor<f32>, tensor<i64>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK-NEXT: return %[[U]]#0, %[[U]]#3, %[[U]]#1, %[[U]]#4, %[[U]]#2, %[[U]]#5, %[[N]]

// Clipping: folded into the grouped update, which reads the unclipped gradients and the norm
// (no clip_by_norm pass over the gradients is left).
// CLIP-LABEL: func.func @apply_gradients(
// CLIP-SAME: %[[CGW:[a-z0-9]+]]: tensor<4x3xf32> {mega.state = "grad.w"}, %[[CGB:[a-z0-9]+]]: tensor<4xf32> {mega.state = "grad.b"},
// CLIP-NOT: mega.clip_by_norm
// CLIP: %[[CN:.*]] = mega.global_norm %[[CGW]], %[[CGB]]
// CLIP-NOT: mega.clip_by_norm
// CLIP: mega.adamw_update_multi %{{.*}}, %{{.*}}, %{{.*}}, %[[CGW]], %{{.*}}, %{{.*}}, %{{.*}}, %[[CGB]], %{{.*}}, %{{.*}} clip %[[CN]] {
// CLIP-SAME: max_norm = 1.500000e+00
// CLIP-SAME: -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
// CLIP-NOT: mega.adamw_update %
// CLIP-NOT: mega.clip_by_norm
// CLIP: return
func.func @forward_backward(%w: tensor<4x3xf32> {mega.param = "w", mega.init = #mega.init<normal, std = 0.02>}, %b: tensor<4xf32> {mega.param = "b", mega.init = #mega.init<zeros>}, %x: tensor<3xf32> {mega.input = "x"}, %gw: tensor<4x3xf32> {mega.state = "grad.w"}, %gb: tensor<4xf32> {mega.state = "grad.b"}) -> (tensor<f32> {mega.output = "loss"}, tensor<4x3xf32> {mega.updates = "grad.w"}, tensor<4xf32> {mega.updates = "grad.b"}) {
  %y = mega.linear %x, %w, %b : (tensor<3xf32>, tensor<4x3xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
  return %l, %gw, %gb : tensor<f32>, tensor<4x3xf32>, tensor<4xf32>
}

// -----

// One parameter: a group of one stays adamw_update.
// CHECK-LABEL: func.func @apply_gradients(
// CHECK-NOT: mega.adamw_update_multi
// CHECK: mega.adamw_update %
// CHECK-NOT: mega.adamw_update_multi
// CLIP-LABEL: func.func @apply_gradients(
// CLIP-NOT: mega.adamw_update_multi
// CLIP: return
func.func @forward_backward(%w: tensor<2x2xf64> {mega.param = "w"}, %gw: tensor<2x2xf64> {mega.state = "grad.w"}) -> (tensor<f64> {mega.output = "loss"}, tensor<2x2xf64> {mega.updates = "grad.w"}) {
  %l = mega.reduce sum %w over [0, 1] : tensor<2x2xf64> -> tensor<f64>
  return %l, %gw : tensor<f64>, tensor<2x2xf64>
}
