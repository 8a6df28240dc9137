// mega-training-autodiff on another function and loss name (function=, loss=).
// RUN: megac-opt %s --mega-training-autodiff="function=step loss=objective" | FileCheck %s
// RUN: not megac-opt %s --mega-training-autodiff 2>&1 | FileCheck %s --check-prefix=DEFAULT

// DEFAULT: error: mega-training-autodiff: no function @forward_backward in the module

// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[P:[a-z0-9]+]]: tensor<2xf64> {mega.param = "p"}, %[[ACC:[a-z0-9]+]]: tensor<2xf64> {mega.state = "grad.p"})
// CHECK-SAME: -> (tensor<f64> {mega.output = "objective"}, tensor<2xf64> {mega.updates = "grad.p"})
// CHECK: %[[DP:.*]] = mega.broadcast %{{.*}} : tensor<1xf64> -> tensor<2xf64>
// CHECK-NEXT: %[[NEW:.*]] = mega.add %[[ACC]], %[[DP]] : tensor<2xf64>
// CHECK-NEXT: return %{{.*}}, %[[NEW]]
func.func @step(%p: tensor<2xf64> {mega.param = "p"}) -> (tensor<f64> {mega.output = "objective"}) {
  %l = mega.reduce sum %p over [0] : tensor<2xf64> -> tensor<f64>
  return %l : tensor<f64>
}
