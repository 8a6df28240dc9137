// RUN: megac-opt %s --split-input-file --mega-training-fuse-last-micro-batch | FileCheck %s --check-prefix=FUSE
// RUN: megac-opt %s --split-input-file --mega-training-fuse-last-micro-batch --mega-schedule-latency-hiding | FileCheck %s

// mega-training-fuse-last-micro-batch (docs/training-step.md "Overlap"): @forward_backward_apply
// is @forward_backward's body followed by @apply_gradients', the accumulators' updates feeding
// the dp buckets. A two-layer linear model at dp 2 with two buckets ([w1], [w2]): the backward
// finishes w2's gradient first, so w2's bucket is packed right after that GEMM and (with the
// latency-hiding pass) its all-reduce starts there, before the remaining backward GEMMs (the
// input gradient and w1's gradient); w1's bucket starts after w1's GEMM. Both are done only
// where the update reads them.
#mesh = #mega.mesh<dp = 2>
module attributes {mega.mesh = #mesh} {
func.func @forward_backward(%w1: tensor<4x4xf32> {mega.param = "w1"},
    %w2: tensor<4x4xf32> {mega.param = "w2"}, %x: tensor<2x4xf32> {mega.input = "x"},
    %g1: tensor<4x4xf32> {mega.state = "grad.w1"}, %g2: tensor<4x4xf32> {mega.state = "grad.w2"})
    -> (tensor<f32> {mega.output = "loss"}, tensor<4x4xf32> {mega.updates = "grad.w1"},
        tensor<4x4xf32> {mega.updates = "grad.w2"}) {
  %h = mega.matmul %x, %w1 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %y = mega.matmul %h, %w2 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %loss = mega.reduce sum %y over [0, 1] : tensor<2x4xf32> -> tensor<f32>
  %dy = mega.neg %y : tensor<2x4xf32>
  %gw2 = mega.matmul %h, %dy accumulate %g2 {transpose_lhs = true} : tensor<2x4xf32>, tensor<2x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %dh = mega.matmul %dy, %w2 {transpose_rhs = true} : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %gw1 = mega.matmul %x, %dh accumulate %g1 {transpose_lhs = true} : tensor<2x4xf32>, tensor<2x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return %loss, %gw1, %gw2 : tensor<f32>, tensor<4x4xf32>, tensor<4x4xf32>
}
func.func @apply_gradients(%w1: tensor<4x4xf32> {mega.param = "w1"},
    %w2: tensor<4x4xf32> {mega.param = "w2"}, %g1: tensor<4x4xf32> {mega.state = "grad.w1"},
    %g2: tensor<4x4xf32> {mega.state = "grad.w2"}, %m1: tensor<4x4xf32> {mega.state = "adam.m.w1"},
    %lr: tensor<f32> {mega.input = "lr"})
    -> (tensor<4x4xf32> {mega.updates = "w1"}, tensor<4x4xf32> {mega.updates = "w2"},
        tensor<4x4xf32> {mega.updates = "adam.m.w1"}, tensor<f32> {mega.output = "grad_norm"}) {
  %f1 = mega.reshape %g1 : tensor<4x4xf32> -> tensor<16xf32>
  %r1 = mega.all_reduce sum %f1 on #mesh axes ["dp"] : tensor<16xf32>
  %f2 = mega.reshape %g2 : tensor<4x4xf32> -> tensor<16xf32>
  %r2 = mega.all_reduce sum %f2 on #mesh axes ["dp"] : tensor<16xf32>
  %u1 = mega.reshape %r1 : tensor<16xf32> -> tensor<4x4xf32>
  %u2 = mega.reshape %r2 : tensor<16xf32> -> tensor<4x4xf32>
  %n = mega.global_norm %u1, %u2 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<f32>
  %m2 = mega.add %m1, %u1 : tensor<4x4xf32>
  %p1 = mega.sub %w1, %m2 : tensor<4x4xf32>
  %p2 = mega.sub %w2, %u2 : tensor<4x4xf32>
  return %p1, %p2, %m2, %n : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>
}
}
// The separate functions stay for micro-batches 1..m-1 and for evaluation.
// FUSE-LABEL: func.func @forward_backward(
// FUSE-LABEL: func.func @apply_gradients(
// Arguments: @forward_backward's, then the moments and lr (w1, w2 are one argument each; the
// accumulators are read from the backward's updates). Outputs renamed last.*.
// FUSE-LABEL: func.func @forward_backward_apply(
// FUSE-SAME:    %[[W1:[a-z0-9]+]]: tensor<4x4xf32> {mega.param = "w1"}
// FUSE-SAME:    %[[W2:[a-z0-9]+]]: tensor<4x4xf32> {mega.param = "w2"}
// FUSE-SAME:    %[[X:[a-z0-9]+]]: tensor<2x4xf32> {mega.input = "x"}
// FUSE-SAME:    %[[G1:[a-z0-9]+]]: tensor<4x4xf32> {mega.state = "grad.w1"}
// FUSE-SAME:    %[[G2:[a-z0-9]+]]: tensor<4x4xf32> {mega.state = "grad.w2"}
// FUSE-SAME:    %[[M1:[a-z0-9]+]]: tensor<4x4xf32> {mega.state = "adam.m.w1"}
// FUSE-SAME:    %[[LR:[a-z0-9]+]]: tensor<f32> {mega.input = "lr"})
// FUSE-SAME:    -> (tensor<f32> {mega.output = "last.loss"}, tensor<4x4xf32> {mega.updates = "grad.w1"}, tensor<4x4xf32> {mega.updates = "grad.w2"}, tensor<4x4xf32> {mega.updates = "w1"}, tensor<4x4xf32> {mega.updates = "w2"}, tensor<4x4xf32> {mega.updates = "adam.m.w1"}, tensor<f32> {mega.output = "last.grad_norm"})
// The packing moves to where each gradient is final; the reductions stay (blocking) in order.
// FUSE:         %[[GW2:.*]] = mega.matmul %{{.*}} accumulate %[[G2]]
// FUSE-NEXT:    %[[F2:.*]] = mega.reshape %[[GW2]] : tensor<4x4xf32> -> tensor<16xf32>
// FUSE-NEXT:    mega.matmul %{{.*}}, %[[W2]] {transpose_rhs = true}
// FUSE-NEXT:    %[[GW1:.*]] = mega.matmul %[[X]], %{{.*}} accumulate %[[G1]]
// FUSE-NEXT:    %[[F1:.*]] = mega.reshape %[[GW1]] : tensor<4x4xf32> -> tensor<16xf32>
// FUSE-NEXT:    mega.all_reduce sum %[[F1]]
// FUSE-NEXT:    mega.all_reduce sum %[[F2]]
// FUSE:         return %{{.*}}, %[[GW1]], %[[GW2]],

// With the latency-hiding pass: w2's reduction starts before the input gradient's and w1's
// GEMMs; both are done where the update reads them, w2's (posted first, so on the link first)
// before w1's, with w2's update between them.
// CHECK-LABEL: func.func @forward_backward_apply(
// CHECK:         %[[GW2:.*]] = mega.matmul %{{.*}} accumulate
// CHECK-NEXT:    %[[F2:.*]] = mega.reshape %[[GW2]]
// CHECK-NEXT:    %[[H2:.*]] = mega.all_reduce_start sum %[[F2]]
// CHECK-NEXT:    mega.matmul %{{.*}} {transpose_rhs = true}
// CHECK-NEXT:    %[[GW1:.*]] = mega.matmul %{{.*}} accumulate
// CHECK-NEXT:    %[[F1:.*]] = mega.reshape %[[GW1]]
// CHECK-NEXT:    %[[H1:.*]] = mega.all_reduce_start sum %[[F1]]
// CHECK-NEXT:    %[[R2:.*]] = mega.collective_done %[[H2]]
// CHECK-NEXT:    %[[D2:.*]] = mega.reshape %[[R2]]
// CHECK-NEXT:    mega.sub %{{.*}}, %[[D2]]
// CHECK-NEXT:    %[[R1:.*]] = mega.collective_done %[[H1]]
// CHECK-NEXT:    mega.reshape %[[R1]]
// CHECK-NEXT:    mega.global_norm

// -----

// fp16 (a @check_gradients: the overflow check runs before the update) keeps the separate
// functions; so does a step whose update has no collective (one rank: nothing to overlap).
#mesh = #mega.mesh<dp = 2>
module attributes {mega.mesh = #mesh} {
func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<4xf32> {mega.updates = "grad.w"}) {
  %a = mega.add %g, %w : tensor<4xf32>
  return %a : tensor<4xf32>
}
func.func @apply_gradients(%w: tensor<4xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<4xf32> {mega.updates = "w"}) {
  %r = mega.all_reduce sum %g on #mesh axes ["dp"] : tensor<4xf32>
  return %r : tensor<4xf32>
}
func.func @check_gradients(%g: tensor<4xf32> {mega.state = "grad.w"})
    -> (tensor<f32> {mega.output = "unscaled_grad_norm"}) {
  %n = mega.global_norm %g : (tensor<4xf32>) -> tensor<f32>
  return %n : tensor<f32>
}
}
// FUSE-LABEL: func.func @check_gradients(
// FUSE-NOT:   @forward_backward_apply

// -----

module {
func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<4xf32> {mega.updates = "grad.w"}) {
  %a = mega.add %g, %w : tensor<4xf32>
  return %a : tensor<4xf32>
}
func.func @apply_gradients(%w: tensor<4xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<4xf32> {mega.updates = "w"}) {
  %r = mega.sub %w, %g : tensor<4xf32>
  return %r : tensor<4xf32>
}
}
// FUSE-LABEL: func.func @apply_gradients(
// FUSE-NOT:   @forward_backward_apply
