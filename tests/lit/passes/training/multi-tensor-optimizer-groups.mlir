// mega-training-multi-tensor-optimizer on hand-written @apply_gradients: one group per (dtype,
// lr, step, betas, eps); an update read before its group's last member stays on its own;
// functions other than @apply_gradients are left alone.
// RUN: megac-opt %s --split-input-file --mega-training-multi-tensor-optimizer | FileCheck %s

// CHECK-LABEL: func.func @apply_gradients(
// f32 with lr: %a, %c (b's beta1 differs, so b stays alone).
// CHECK: %[[B:[a-z_]+]], %{{.*}}, %{{.*}} = mega.adamw_update %arg1, %arg1, %arg1, %arg1, %arg6, %arg7 {beta1 = 8.000000e-01
// CHECK: %[[F64:.*]]:6 = mega.adamw_update_multi %arg8, %arg7, %arg3, %arg3, %arg3, %arg3, %arg4, %arg4, %arg4, %arg4 {{.*}}weight_decays = array<f64: 1.000000e-01, 2.000000e-01>
// CHECK: %[[F32:.*]]:6 = mega.adamw_update_multi %arg6, %arg7, %arg0, %arg0, %arg0, %arg0, %arg2, %arg2, %arg2, %arg2 {{.*}}weight_decays = array<f64: 1.000000e-01, 0.000000e+00>
// CHECK-NOT: mega.adamw_update %
// CHECK: return %[[F32]]#0, %[[B]], %[[F32]]#3, %[[F64]]#0, %[[F64]]#3
func.func @apply_gradients(%p0: tensor<4xf32>, %p1: tensor<4xf32>, %p2: tensor<2x2xf32>,
                           %q0: tensor<3xf64>, %q1: tensor<5xf64>, %unused: tensor<f32>,
                           %lr: tensor<f32>, %step: tensor<i64>, %lr64: tensor<f64>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<2x2xf32>, tensor<3xf64>, tensor<5xf64>) {
  %a:3 = mega.adamw_update %p0, %p0, %p0, %p0, %lr, %step {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %b:3 = mega.adamw_update %p1, %p1, %p1, %p1, %lr, %step {beta1 = 0.8, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %d:3 = mega.adamw_update %q0, %q0, %q0, %q0, %lr64, %step {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>, tensor<3xf64>, tensor<f64>, tensor<i64>) -> (tensor<3xf64>, tensor<3xf64>, tensor<3xf64>)
  %e:3 = mega.adamw_update %q1, %q1, %q1, %q1, %lr64, %step {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.2}
      : (tensor<5xf64>, tensor<5xf64>, tensor<5xf64>, tensor<5xf64>, tensor<f64>, tensor<i64>) -> (tensor<5xf64>, tensor<5xf64>, tensor<5xf64>)
  %c:3 = mega.adamw_update %p2, %p2, %p2, %p2, %lr, %step {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.0}
      : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>, tensor<i64>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>)
  return %a#0, %b#0, %c#0, %d#0, %e#0 : tensor<4xf32>, tensor<4xf32>, tensor<2x2xf32>, tensor<3xf64>, tensor<5xf64>
}

// -----

// An update read before the last of its group stays adamw_update; the other two group.
// CHECK-LABEL: func.func @apply_gradients(
// CHECK-NEXT: %[[X:[a-z_]+]], %{{.*}}, %{{.*}} = mega.adamw_update %arg0
// CHECK-NEXT: %[[S:.*]] = mega.add %[[X]], %[[X]]
// CHECK-NEXT: mega.adamw_update_multi %arg3, %arg4, %arg1, %arg1, %arg1, %arg1, %arg2, %arg2, %arg2, %arg2
// CHECK-NOT: mega.adamw_update %
func.func @apply_gradients(%p0: tensor<4xf32>, %p1: tensor<4xf32>, %p2: tensor<4xf32>,
                           %lr: tensor<f32>, %step: tensor<i64>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %x:3 = mega.adamw_update %p0, %p0, %p0, %p0, %lr, %step {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %s = mega.add %x#0, %x#0 : tensor<4xf32>
  %y:3 = mega.adamw_update %p1, %p1, %p1, %p1, %lr, %step {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %z:3 = mega.adamw_update %p2, %p2, %p2, %p2, %lr, %step {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %s, %y#0, %z#0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Only @apply_gradients is grouped.
// CHECK-LABEL: func.func @other(
// CHECK-NOT: mega.adamw_update_multi
func.func @other(%p0: tensor<4xf32>, %p1: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>)
    -> (tensor<4xf32>, tensor<4xf32>) {
  %x:3 = mega.adamw_update %p0, %p0, %p0, %p0, %lr, %step {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %y:3 = mega.adamw_update %p1, %p1, %p1, %p1, %lr, %step {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %x#0, %y#0 : tensor<4xf32>, tensor<4xf32>
}
