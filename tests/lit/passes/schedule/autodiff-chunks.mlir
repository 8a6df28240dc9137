// RUN: megac-opt %s --mega-training-autodiff | FileCheck %s

// mega-training-autodiff on pipeline chunks (docs/pipeline.md): act.c<c+1> results are seeded by
// new grad.act.c<c+1> arguments, act.c<c> arguments get their gradients as grad.act.c<c>
// results (zero when the chunk's outputs do not depend on them), a parameter's
// mega.grad_partial goes onto its accumulator.

module {
  module @stage0 attributes {mega.stage = 0 : i64} {
    func.func @forward_backward.c0(%w: tensor<4xf32> {mega.param = "w0", mega.grad_partial = ["dp"]},
        %x: tensor<4xf32> {mega.input = "x"})
        -> (tensor<4xf32> {mega.output = "act.c1.0"}, tensor<4xf32> {mega.output = "act.c1.1"}) {
      %y = mega.mul %w, %x : tensor<4xf32>
      return %x, %y : tensor<4xf32>, tensor<4xf32>
    }
  }
  module @stage1 attributes {mega.stage = 1 : i64} {
    func.func @forward_backward.c1(%w: tensor<4xf32> {mega.param = "w1"},
        %a0: tensor<4xf32> {mega.input = "act.c1.0"}, %a1: tensor<4xf32> {mega.input = "act.c1.1"})
        -> (tensor<f32> {mega.output = "loss"}) {
      %y = mega.mul %w, %a1 : tensor<4xf32>
      %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
      return %l : tensor<f32>
    }
  }
}

// CHECK-LABEL: func.func @forward_backward.c0(
// CHECK-SAME:    %[[W:.*]]: tensor<4xf32> {mega.grad_partial = ["dp"], mega.param = "w0"}, %[[X:.*]]: tensor<4xf32> {mega.input = "x"},
// CHECK-SAME:    %[[G0:.*]]: tensor<4xf32> {mega.input = "grad.act.c1.0"}, %[[G1:.*]]: tensor<4xf32> {mega.input = "grad.act.c1.1"},
// CHECK-SAME:    %[[ACC:.*]]: tensor<4xf32> {mega.grad_partial = ["dp"], mega.state = "grad.w0"})
// CHECK-SAME:    -> (tensor<4xf32> {mega.output = "act.c1.0"}, tensor<4xf32> {mega.output = "act.c1.1"}, tensor<4xf32> {mega.updates = "grad.w0"})
// CHECK:         %[[Y:.*]] = mega.mul %[[W]], %[[X]]
// CHECK:         %[[DW:.*]] = mega.mul %[[G1]], %[[X]]
// CHECK:         %[[NEW:.*]] = mega.add %[[ACC]], %[[DW]]
// CHECK:         return %[[X]], %[[Y]], %[[NEW]]

// CHECK-LABEL: func.func @forward_backward.c1(
// CHECK-SAME:    %[[W:.*]]: tensor<4xf32> {mega.param = "w1"}, %[[A0:.*]]: tensor<4xf32> {mega.input = "act.c1.0"}, %[[A1:.*]]: tensor<4xf32> {mega.input = "act.c1.1"},
// CHECK-SAME:    %[[ACC:.*]]: tensor<4xf32> {mega.state = "grad.w1"})
// CHECK-SAME:    -> (tensor<f32> {mega.output = "loss"}, tensor<4xf32> {mega.output = "grad.act.c1.0"}, tensor<4xf32> {mega.output = "grad.act.c1.1"}, tensor<4xf32> {mega.updates = "grad.w1"})
// CHECK:         %[[Y:.*]] = mega.mul %[[W]], %[[A1]]
// CHECK:         %[[L:.*]] = mega.reduce sum %[[Y]]
// CHECK:         %[[ONE:.*]] = mega.constant dense<1.000000e+00> : tensor<f32>
// CHECK:         %[[DY:.*]] = mega.broadcast
// CHECK-DAG:     %[[DW:.*]] = mega.mul %[[DY]], %[[A1]]
// CHECK-DAG:     %[[DA1:.*]] = mega.mul %[[DY]], %[[W]]
// CHECK-DAG:     %[[ZERO:.*]] = mega.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK:         %[[NEW:.*]] = mega.add %[[ACC]], %[[DW]]
// CHECK:         return %[[L]], %[[ZERO]], %[[DA1]], %[[NEW]]
