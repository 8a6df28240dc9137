// mega-training-optimizer under ZeRO-3: padded shards (docs/training-step.md, "Padded shards").
// A parameter no dim of which dp divides ([3, 5] at dp 2) is stored as ceil(3/2) = 2 rows a
// rank, dim 0 padded to 4 (rank 1: row 2 and a zero row): all-gathered into [4, 5] and sliced to
// its 3 rows before its use, its gradient padded with a zero row and reduce-scattered into the
// [2, 5] accumulator; @apply_gradients updates the [2, 5] shard with its weight decay (a rank-2
// parameter's) and no dp collective but the norm's. Under mixed precision the cast of the f32
// master follows the slice. A stage where nothing can shard (a scalar, and a weight whose dim 0
// tp splits with no dim dp divides) is refused.
// RUN: megac-opt %s --mega-training-optimizer="zero=3" --split-input-file --verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[W:arg1]]: tensor<2x5xf32> {mega.dim_axes = {{\[\["dp"\], \[\]\]}}, mega.global_shape = array<i64: 3, 5>, mega.grad_partial = ["dp"], mega.param = "w"}
// CHECK-SAME: %[[ACC:arg2]]: tensor<2x5xf32> {mega.dim_axes = {{\[\["dp"\], \[\]\]}}, mega.global_shape = array<i64: 3, 5>, mega.state = "grad.w"}
// CHECK-NEXT: %[[ALL:.*]] = mega.all_gather %[[W]] on #mesh axes ["dp"] dim 0 : tensor<2x5xf32> -> tensor<4x5xf32>
// CHECK-NEXT: %[[ROWS:.*]] = mega.slice %[[ALL]] [0, 0] to [3, 5] step [1, 1] : tensor<4x5xf32> -> tensor<3x5xf32>
// CHECK-NEXT: mega.mul %arg0, %[[ROWS]] : tensor<3x5xf32>
// CHECK: %[[PAD:.*]] = mega.pad %{{.*}} low [0, 0] high [1, 0] interior [0, 0] : tensor<3x5xf32> -> tensor<4x5xf32>
// CHECK-NEXT: %[[MINE:.*]] = mega.reduce_scatter sum %[[PAD]] on #mesh axes ["dp"] dim 0 : tensor<4x5xf32> -> tensor<2x5xf32>
// CHECK-NEXT: mega.add %[[ACC]], %[[MINE]] : tensor<2x5xf32>
// CHECK-LABEL: func.func @apply_gradients(
// CHECK-SAME: tensor<2x5xf32> {mega.dim_axes = {{\[\["dp"\], \[\]\]}}, mega.global_shape = array<i64: 3, 5>, mega.state = "adam.v.w"}
// CHECK-NOT: mega.all_gather
// CHECK-NOT: mega.reduce_scatter
// CHECK: mega.all_reduce sum %{{.*}} on #mesh axes ["dp"] : tensor<f32>
// CHECK: mega.adamw_update {{.*}}weight_decay = 1.000000e-02 : f64{{.*}} -> (tensor<2x5xf32>, tensor<2x5xf32>, tensor<2x5xf32>)
// CHECK-NOT: mega.all_gather
// CHECK: return
module attributes {mega.mesh = #mega.mesh<pp = 1, dp = 2, tp = 1>} {
  func.func @forward_backward(%x: tensor<3x5xf32> {mega.input = "x"}, %w: tensor<3x5xf32> {mega.param = "w", mega.grad_partial = ["dp"]}, %gw: tensor<3x5xf32> {mega.state = "grad.w"}) -> (tensor<3x5xf32> {mega.output = "y"}, tensor<3x5xf32> {mega.updates = "grad.w"}) {
    %y = mega.mul %x, %w : tensor<3x5xf32>
    %g = mega.mul %x, %x : tensor<3x5xf32>
    %a = mega.add %gw, %g : tensor<3x5xf32>
    return %y, %a : tensor<3x5xf32>, tensor<3x5xf32>
  }
}

// -----

// A bias of 3 at dp 2 under bf16: the gather is of the f32 master shard, the bf16 copy a cast
// of the sliced rows.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[B:arg1]]: tensor<2xf32> {mega.dim_axes = {{\[\["dp"\]\]}}, mega.global_shape = array<i64: 3>
// CHECK-NEXT: %[[ALL:.*]] = mega.all_gather %[[B]] on #mesh axes ["dp"] dim 0 : tensor<2xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[ROWS:.*]] = mega.slice %[[ALL]] [0] to [3] step [1] : tensor<4xf32> -> tensor<3xf32>
// CHECK-NEXT: %[[HALF:.*]] = mega.cast %[[ROWS]] : tensor<3xf32> -> tensor<3xbf16>
// CHECK-NEXT: mega.add %arg0, %[[HALF]] : tensor<3xbf16>
// CHECK: mega.pad %{{.*}} low [0] high [1] interior [0] : tensor<3xf32> -> tensor<4xf32>
// CHECK-LABEL: func.func @apply_gradients(
// CHECK: mega.adamw_update {{.*}}weight_decay = 0.000000e+00 : f64{{.*}} -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>)
module attributes {mega.mesh = #mega.mesh<pp = 1, dp = 2, tp = 1>} {
  func.func @forward_backward(%x: tensor<3xbf16> {mega.input = "x"}, %b: tensor<3xf32> {mega.param = "b", mega.grad_partial = ["dp"]}, %gb: tensor<3xf32> {mega.state = "grad.b"}) -> (tensor<3xbf16> {mega.output = "y"}, tensor<3xf32> {mega.updates = "grad.b"}) {
    %h = mega.cast %b : tensor<3xf32> -> tensor<3xbf16>
    %y = mega.add %x, %h : tensor<3xbf16>
    %g = mega.cast %x : tensor<3xbf16> -> tensor<3xf32>
    %a = mega.add %gb, %g : tensor<3xf32>
    return %y, %a : tensor<3xbf16>, tensor<3xf32>
  }
}

// -----

// expected-error@+2 {{mega-training-optimizer: zero=3 shards parameters over dp = 2, but no parameter of @forward_backward can be sharded (parameter 'scale' is [scalar]: a scalar, or split on dim 0 by another axis with no dim that dp divides); use --zero 1 or 2}}
module attributes {mega.mesh = #mega.mesh<pp = 1, dp = 2, tp = 2>} {
  func.func @forward_backward(%s: tensor<f32> {mega.param = "scale", mega.grad_partial = ["dp"]}, %w: tensor<3x3xf32> {mega.param = "w", mega.dim_axes = [["tp"], []], mega.global_shape = array<i64: 6, 3>, mega.grad_partial = ["dp"]}, %gs: tensor<f32> {mega.state = "grad.scale"}, %gw: tensor<3x3xf32> {mega.state = "grad.w"}) -> (tensor<f32> {mega.output = "loss"}, tensor<f32> {mega.updates = "grad.scale"}, tensor<3x3xf32> {mega.updates = "grad.w"}) {
    %a = mega.add %gs, %s : tensor<f32>
    %b = mega.add %gw, %w : tensor<3x3xf32>
    return %s, %a, %b : tensor<f32>, tensor<f32>, tensor<3x3xf32>
  }
}
