// mega-training-optimizer: @apply_gradients from @forward_backward's parameters and
// accumulators; weight decay only on rank >= 2; optional clipping; f64 and f32 lr.
// RUN: megac-opt %s --mega-training-optimizer --split-input-file | FileCheck %s
// RUN: megac-opt %s --mega-training-optimizer="beta1=0.8 beta2=0.95 eps=1e-6 weight-decay=0.1 clip-grad=1.5" --split-input-file | FileCheck %s --check-prefix=CLIP

// CHECK-LABEL: func.func @forward_backward(
// CHECK-LABEL: func.func @apply_gradients(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x3xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "w"}, %[[B:[a-z0-9]+]]: tensor<4xf32> {mega.init = #mega.init<zeros>, mega.param = "b"},
// CHECK-SAME: %[[GW:[a-z0-9]+]]: tensor<4x3xf32> {mega.state = "grad.w"}, %[[GB:[a-z0-9]+]]: tensor<4xf32> {mega.state = "grad.b"},
// CHECK-SAME: %[[MW:[a-z0-9]+]]: tensor<4x3xf32> {mega.state = "adam.m.w"}, %[[MB:[a-z0-9]+]]: tensor<4xf32> {mega.state = "adam.m.b"},
// CHECK-SAME: %[[VW:[a-z0-9]+]]: tensor<4x3xf32> {mega.state = "adam.v.w"}, %[[VB:[a-z0-9]+]]: tensor<4xf32> {mega.state = "adam.v.b"},
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {mega.input = "lr"}, %[[STEP:[a-z0-9]+]]: tensor<i64> {mega.input = "step"})
// CHECK-SAME: -> (tensor<4x3xf32> {mega.updates = "w"}, tensor<4xf32> {mega.updates = "b"}, tensor<4x3xf32> {mega.updates = "adam.m.w"}, tensor<4xf32> {mega.updates = "adam.m.b"}, tensor<4x3xf32> {mega.updates = "adam.v.w"}, tensor<4xf32> {mega.updates = "adam.v.b"}, tensor<f32> {mega.output = "grad_norm"})
// CHECK-NEXT: %[[N:.*]] = mega.global_norm %[[GW]], %[[GB]] : (tensor<4x3xf32>, tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT: %[[PW:.*]], %[[MW2:.*]], %[[VW2:.*]] = mega.adamw_update %[[W]], %[[GW]], %[[MW]], %[[VW]], %[[LR]], %[[STEP]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-02 : f64}
// CHECK-NEXT: %[[PB:.*]], %[[MB2:.*]], %[[VB2:.*]] = mega.adamw_update %[[B]], %[[GB]], %[[MB]], %[[VB]], %[[LR]], %[[STEP]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: return %[[PW]], %[[PB]], %[[MW2]], %[[MB2]], %[[VW2]], %[[VB2]], %[[N]]

// CLIP-LABEL: func.func @apply_gradients(
// CLIP: %[[N:.*]] = mega.global_norm %[[GW:[a-z0-9]+]], %[[GB:[a-z0-9]+]]
// CLIP-NEXT: %[[CW:.*]] = mega.clip_by_norm %[[GW]], %[[N]] max 1.500000e+00 : tensor<4x3xf32>, tensor<f32>
// CLIP-NEXT: %[[CB:.*]] = mega.clip_by_norm %[[GB]], %[[N]] max 1.500000e+00 : tensor<4xf32>, tensor<f32>
// CLIP-NEXT: mega.adamw_update %{{.*}}, %[[CW]], {{.*}} {beta1 = 8.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 9.9999999999999995E-7 : f64, weight_decay = 1.000000e-01 : f64}
// CLIP-NEXT: mega.adamw_update %{{.*}}, %[[CB]], {{.*}} weight_decay = 0.000000e+00 : f64}
// CLIP-NEXT: return
func.func @forward_backward(%w: tensor<4x3xf32> {mega.param = "w", mega.init = #mega.init<normal, std = 0.02>}, %b: tensor<4xf32> {mega.param = "b", mega.init = #mega.init<zeros>}, %x: tensor<3xf32> {mega.input = "x"}, %gw: tensor<4x3xf32> {mega.state = "grad.w"}, %gb: tensor<4xf32> {mega.state = "grad.b"}) -> (tensor<f32> {mega.output = "loss"}, tensor<4x3xf32> {mega.updates = "grad.w"}, tensor<4xf32> {mega.updates = "grad.b"}) {
  %y = mega.linear %x, %w, %b : (tensor<3xf32>, tensor<4x3xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
  return %l, %gw, %gb : tensor<f32>, tensor<4x3xf32>, tensor<4xf32>
}

// -----

// An f64 model: lr and the norm are f64.
// CHECK-LABEL: func.func @apply_gradients(
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f64> {mega.input = "lr"}, %{{.*}}: tensor<i64> {mega.input = "step"})
// CHECK-SAME: tensor<f64> {mega.output = "grad_norm"})
// CHECK-NEXT: mega.global_norm %{{.*}} : (tensor<2x2xf64>) -> tensor<f64>
// CHECK-NEXT: mega.adamw_update %{{.*}}, %[[LR]], %{{.*}} : (tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>, tensor<2x2xf64>, tensor<f64>, tensor<i64>)
func.func @forward_backward(%w: tensor<2x2xf64> {mega.param = "w"}, %gw: tensor<2x2xf64> {mega.state = "grad.w"}) -> (tensor<f64> {mega.output = "loss"}, tensor<2x2xf64> {mega.updates = "grad.w"}) {
  %l = mega.reduce sum %w over [0, 1] : tensor<2x2xf64> -> tensor<f64>
  return %l, %gw : tensor<f64>, tensor<2x2xf64>
}
