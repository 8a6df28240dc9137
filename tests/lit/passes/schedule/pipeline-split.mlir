// RUN: megac-opt %s --mega-pipeline-split="stages=2" | FileCheck %s
// RUN: megac-opt %s --mega-pipeline-split="stages=3" | FileCheck %s --check-prefix=PASS
// RUN: megac-opt %s --mega-pipeline-split="stages=1" | FileCheck %s --check-prefix=ONE

// Three residual layers. Values that depend only on parameters (the bias broadcast %bb) or only
// on data (the mask's %mk) are recomputed by every chunk that reads them rather than sent.
// %x0 is read again by the loss, so it crosses every cut (act.c<c>.0) and is passed through.

module attributes {mega.mesh = #mega.mesh<pp = 3>} {
  func.func @forward(%x: tensor<2x4xf32> {mega.input = "x"}) -> (tensor<2x4xf32> {mega.output = "logits"}) {
    return %x : tensor<2x4xf32>
  }
  func.func @forward_backward(%x: tensor<2x4xf32> {mega.input = "x"},
      %w0: tensor<4x4xf32> {mega.param = "w0"}, %w1: tensor<4x4xf32> {mega.param = "w1"},
      %w2: tensor<4x4xf32> {mega.param = "w2"}, %b: tensor<4xf32> {mega.param = "b", mega.init = #mega.init<zeros>},
      %mask: tensor<2x4xf32> {mega.input = "mask"})
      -> (tensor<f32> {mega.output = "loss"}) attributes {mega.loss_kind = "causal"} {
    %bb = mega.broadcast %b : tensor<4xf32> -> tensor<2x4xf32>
    %x0 = mega.add %x, %bb : tensor<2x4xf32>
    %mk = mega.exp %mask : tensor<2x4xf32>
    %t = mega.tanh %x0 : tensor<2x4xf32>
    %e = mega.mul %t, %mk : tensor<2x4xf32>
    %l0 = mega.linear %e, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %t0 = mega.tanh %l0 : tensor<2x4xf32>
    %h0 = mega.add %e, %t0 : tensor<2x4xf32>
    %l1 = mega.linear %h0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %t1 = mega.tanh %l1 : tensor<2x4xf32>
    %h1 = mega.add %h0, %t1 : tensor<2x4xf32>
    %l2 = mega.linear %h1, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %t2 = mega.tanh %l2 : tensor<2x4xf32>
    %h2 = mega.add %h1, %t2 : tensor<2x4xf32>
    %o = mega.add %h2, %bb : tensor<2x4xf32>
    %r = mega.mul %o, %x0 : tensor<2x4xf32>
    %rm = mega.mul %r, %mk : tensor<2x4xf32>
    %s = mega.reduce sum %rm over [0, 1] : tensor<2x4xf32> -> tensor<f32>
    return %s : tensor<f32>
  }
}

// Two stages: the layer boundaries cross %x0 too (twice the least crossing, right after %x0),
// and balance best after the second layer.
// CHECK-LABEL: module attributes {mega.mesh = #mesh}
// CHECK-NOT:   func.func @forward(
// CHECK:       module @stage0 attributes {mega.mesh = #mesh, mega.stage = 0 : i64}
// CHECK:       func.func @forward_backward.c0(%[[W0:.*]]: tensor<4x4xf32> {mega.param = "w0"}, %[[W1:.*]]: tensor<4x4xf32> {mega.param = "w1"}, %[[B:.*]]: tensor<4xf32> {mega.init = #mega.init<zeros>, mega.param = "b", mega.shared_stages = [0, 1]}, %[[X:.*]]: tensor<2x4xf32> {mega.input = "x"}, %[[M:.*]]: tensor<2x4xf32> {mega.input = "mask"})
// CHECK-SAME:      -> (tensor<2x4xf32> {mega.output = "act.c1.0"}, tensor<2x4xf32> {mega.output = "act.c1.1"}) attributes {mega.loss_kind = "causal"}
// CHECK-NEXT:    %[[BB:.*]] = mega.broadcast %[[B]]
// CHECK-NEXT:    %[[X0:.*]] = mega.add %[[X]], %[[BB]]
// CHECK-NEXT:    %[[MK:.*]] = mega.exp %[[M]]
// CHECK-NEXT:    %[[T:.*]] = mega.tanh %[[X0]]
// CHECK-NEXT:    %[[E:.*]] = mega.mul %[[T]], %[[MK]]
// CHECK-NEXT:    mega.linear %[[E]], %[[W0]]
// CHECK:         mega.linear %{{.*}}, %[[W1]]
// CHECK-NEXT:    mega.tanh
// CHECK-NEXT:    %[[H1:.*]] = mega.add
// CHECK-NEXT:    return %[[X0]], %[[H1]]
// CHECK:       module @stage1 attributes {mega.mesh = #mesh, mega.stage = 1 : i64}
// CHECK:       func.func @forward_backward.c1(%[[W2:.*]]: tensor<4x4xf32> {mega.param = "w2"}, %[[B1:.*]]: tensor<4xf32> {mega.init = #mega.init<zeros>, mega.param = "b", mega.shared_stages = [0, 1]}, %[[A0:.*]]: tensor<2x4xf32> {mega.input = "act.c1.0"}, %[[A1:.*]]: tensor<2x4xf32> {mega.input = "act.c1.1"}, %[[M1:.*]]: tensor<2x4xf32> {mega.input = "mask"})
// CHECK-SAME:      -> (tensor<f32> {mega.output = "loss"})
// CHECK-NEXT:    %[[BB1:.*]] = mega.broadcast %[[B1]]
// CHECK-NEXT:    %[[MK1:.*]] = mega.exp %[[M1]]
// CHECK-NEXT:    mega.linear %[[A1]], %[[W2]]
// CHECK:         %[[O:.*]] = mega.add %{{.*}}, %[[BB1]]
// CHECK-NEXT:    %[[R:.*]] = mega.mul %[[O]], %[[A0]]
// CHECK-NEXT:    mega.mul %[[R]], %[[MK1]]
// CHECK:         return %{{.*}} : tensor<f32>

// Three stages: the middle chunk passes %x0 through and reads neither b nor the mask.
// PASS:      func.func @forward_backward.c0(
// PASS-SAME:   mega.param = "b", mega.shared_stages = [0, 2]
// PASS-SAME:   -> (tensor<2x4xf32> {mega.output = "act.c1.0"}, tensor<2x4xf32> {mega.output = "act.c1.1"})
// PASS:      func.func @forward_backward.c1(%[[W1:.*]]: tensor<4x4xf32> {mega.param = "w1"}, %[[A0:.*]]: tensor<2x4xf32> {mega.input = "act.c1.0"}, %[[A1:.*]]: tensor<2x4xf32> {mega.input = "act.c1.1"})
// PASS-SAME:   -> (tensor<2x4xf32> {mega.output = "act.c2.0"}, tensor<2x4xf32> {mega.output = "act.c2.1"})
// PASS-NEXT:   mega.linear %[[A1]], %[[W1]]
// PASS:        return %[[A0]], %{{.*}} : tensor<2x4xf32>, tensor<2x4xf32>
// PASS:      func.func @forward_backward.c2(
// PASS-SAME:   mega.param = "b", mega.shared_stages = [0, 2]
// PASS-SAME:   {mega.input = "act.c2.0"}
// PASS-SAME:   {mega.input = "mask"}
// PASS-SAME:   -> (tensor<f32> {mega.output = "loss"})

// One stage: nothing changes.
// ONE:     func.func @forward(
// ONE:     func.func @forward_backward(
// ONE-NOT: module @stage
