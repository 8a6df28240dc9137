// mega.slice under partitioning: a dim sliced partially stays whole (tp: the column-parallel
// output is all-gathered first); a dim taken whole may stay split (dp), and then the slice's
// static limits must become the local ones. (ONNX GPT-2 exports split the fused qkv with
// slices [0, 0, k*h] to [B, S, (k+1)*h], so every dp layout of them depends on this.)
// RUN: megac-opt %s --mega-sharding-propagation="dp=2" --mega-spmdize | FileCheck %s --check-prefix=DP
// RUN: megac-opt %s --mega-sharding-propagation="tp=2" --mega-spmdize | FileCheck %s --check-prefix=TP

// The loss stays a partial sum over dp (nothing here needs it whole): the result says so.
// DP-LABEL: func.func @forward_backward(
// DP-SAME: mega.partial_axes = ["dp"]
// DP: %[[Y:.*]] = mega.linear %{{.*}} : (tensor<2x4xf32>, tensor<6x4xf32>) -> tensor<2x6xf32>
// DP: mega.slice %[[Y]] [0, 2] to [2, 4] step [1, 1] : tensor<2x6xf32> -> tensor<2x2xf32>

// TP-LABEL: func.func @forward_backward(
// TP: %[[Y:.*]] = mega.linear %{{.*}} : (tensor<4x4xf32>, tensor<3x4xf32>) -> tensor<4x3xf32>
// TP: %[[G:.*]] = mega.all_gather %[[Y]] on #mesh axes ["tp"] dim 1 : tensor<4x3xf32> -> tensor<4x6xf32>
// TP: mega.slice %[[G]] [0, 2] to [4, 4] step [1, 1] : tensor<4x6xf32> -> tensor<4x2xf32>

func.func @forward_backward(%w: tensor<6x4xf32> {mega.param = "w"}, %x: tensor<4x4xf32> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  %y = mega.linear %x, %w : (tensor<4x4xf32>, tensor<6x4xf32>) -> tensor<4x6xf32>
  %s = mega.slice %y [0, 2] to [4, 4] step [1, 1] : tensor<4x6xf32> -> tensor<4x2xf32>
  %l = mega.reduce sum %s over [0, 1] : tensor<4x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}
