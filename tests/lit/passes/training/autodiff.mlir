// mega-training-autodiff: the seed, the reverse walk, accumulation of values used several
// times, parameters the loss does not reach, integer and mask paths, state arguments and
// their updates. autodiff-rules.mlir checks what each op's gradient rule builds.
// RUN: megac-opt %s --mega-training-autodiff --split-input-file | FileCheck %s

// The example of Passes.td, in full.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4xf32> {mega.param = "w"}, %[[X:[a-z0-9]+]]: tensor<4xf32> {mega.input = "x"}, %[[ACC:[a-z0-9]+]]: tensor<4xf32> {mega.state = "grad.w"})
// CHECK-SAME: -> (tensor<f32> {mega.output = "loss"}, tensor<4xf32> {mega.updates = "grad.w"})
// CHECK-NEXT: %[[Y:.*]] = mega.mul %[[W]], %[[X]] : tensor<4xf32>
// CHECK-NEXT: %[[L:.*]] = mega.reduce sum %[[Y]] over [0] : tensor<4xf32> -> tensor<f32>
// CHECK-NEXT: %[[ONE:.*]] = mega.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[R:.*]] = mega.reshape %[[ONE]] : tensor<f32> -> tensor<1xf32>
// CHECK-NEXT: %[[DY:.*]] = mega.broadcast %[[R]] : tensor<1xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[DW:.*]] = mega.mul %[[DY]], %[[X]] : tensor<4xf32>
// CHECK-NEXT: %[[ACC2:.*]] = mega.add %[[ACC]], %[[DW]] : tensor<4xf32>
// CHECK-NEXT: return %[[L]], %[[ACC2]] : tensor<f32>, tensor<4xf32>
func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"}, %x: tensor<4xf32> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  %y = mega.mul %w, %x : tensor<4xf32>
  %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// w is used three times (twice by one op): its gradient is the sum. `unused` reaches only a
// non-loss result and `frozen` only a comparison: both keep their accumulators unchanged. The
// mask path (compare, where's condition) carries no gradient; other results stay in place.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<3xf64> {mega.param = "w"}, %[[U:[a-z0-9]+]]: tensor<3xf64> {mega.param = "unused"}, %[[F:[a-z0-9]+]]: tensor<3xf64> {mega.param = "frozen"}, %[[AW:[a-z0-9]+]]: tensor<3xf64> {mega.state = "grad.w"}, %[[AU:[a-z0-9]+]]: tensor<3xf64> {mega.state = "grad.unused"}, %[[AF:[a-z0-9]+]]: tensor<3xf64> {mega.state = "grad.frozen"})
// CHECK-SAME: -> (tensor<3xf64> {mega.output = "other"}, tensor<f64> {mega.output = "loss"}, tensor<3xf64> {mega.updates = "grad.w"}, tensor<3xf64> {mega.updates = "grad.unused"}, tensor<3xf64> {mega.updates = "grad.frozen"})
// CHECK: %[[SQ:.*]] = mega.mul %[[W]], %[[W]]
// CHECK: %[[MASK:.*]] = mega.compare gt %[[F]], %[[W]]
// CHECK: %[[SEL:.*]] = mega.where %[[MASK]], %[[SQ]], %[[W]]
// CHECK: %[[L:.*]] = mega.reduce sum
// CHECK: mega.constant dense<1.000000e+00> : tensor<f64>
// CHECK-NOT: mega.compare
// CHECK: %[[ZERO:.*]] = mega.constant dense<0.000000e+00> : tensor<3xf64>
// CHECK: %[[DSQ:.*]] = mega.where %[[MASK]], %{{.*}}, %[[ZERO]]
// CHECK: %[[DWF:.*]] = mega.where %[[MASK]], %[[ZERO]], %{{.*}}
// CHECK-NEXT: %[[D1:.*]] = mega.mul %[[DSQ]], %[[W]]
// CHECK-NEXT: %[[D2:.*]] = mega.mul %[[DSQ]], %[[W]]
// CHECK-NEXT: %[[S1:.*]] = mega.add %[[DWF]], %[[D1]]
// CHECK-NEXT: %[[S2:.*]] = mega.add %[[S1]], %[[D2]]
// CHECK: %[[NEW:.*]] = mega.add %[[AW]], %[[S2]]
// CHECK-NEXT: return %{{.*}}, %[[L]], %[[NEW]], %[[AU]], %[[AF]]
func.func @forward_backward(%w: tensor<3xf64> {mega.param = "w"}, %unused: tensor<3xf64> {mega.param = "unused"}, %frozen: tensor<3xf64> {mega.param = "frozen"}) -> (tensor<3xf64> {mega.output = "other"}, tensor<f64> {mega.output = "loss"}) {
  %sq = mega.mul %w, %w : tensor<3xf64>
  %mask = mega.compare gt %frozen, %w : tensor<3xf64>
  %sel = mega.where %mask, %sq, %w : tensor<3xi1>, tensor<3xf64>
  %l = mega.reduce sum %sel over [0] : tensor<3xf64> -> tensor<f64>
  %other = mega.exp %unused : tensor<3xf64>
  return %other, %l : tensor<3xf64>, tensor<f64>
}

// -----

// Integer values end the walk: a cast to i64 and back carries nothing, and the loss's only
// path from the parameter goes through it, so the accumulator stays as it is.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[ACC:[a-z0-9]+]]: tensor<2xf32> {mega.state = "grad.p"})
// CHECK-NOT: mega.constant
// CHECK: return %{{.*}}, %[[ACC]] : tensor<f32>, tensor<2xf32>
func.func @forward_backward(%p: tensor<2xf32> {mega.param = "p"}) -> (tensor<f32> {mega.output = "loss"}) {
  %i = mega.cast %p : tensor<2xf32> -> tensor<2xi64>
  %f = mega.cast %i : tensor<2xi64> -> tensor<2xf32>
  %l = mega.reduce sum %f over [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Another function and loss name (function= and loss= options are in autodiff-options.mlir);
// functions other than @forward_backward are left alone.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %{{.*}}: tensor<2xf32> {mega.param = "p"}) -> (tensor<f32> {mega.output = "loss"})
// CHECK-NOT: mega.state
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: {mega.state = "grad.p"}
func.func @forward(%p: tensor<2xf32> {mega.param = "p"}) -> (tensor<f32> {mega.output = "loss"}) {
  %l = mega.reduce sum %p over [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}
func.func @forward_backward(%p: tensor<2xf32> {mega.param = "p"}) -> (tensor<f32> {mega.output = "loss"}) {
  %l = mega.reduce sum %p over [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}
