// A dim split over two mesh axes (the batch over dp and ep under expert parallelism) lists them
// major first; spmdize gathers the minor axis first and slices the major first, so each step
// keeps a rank's rows one contiguous block; partial sums over several axes are one all-reduce.
// RUN: megac-opt %s --mega-spmdize | FileCheck %s

#mesh = #mega.mesh<pp = 1, dp = 2, ep = 2, tp = 1>
module attributes {mega.mesh = #mesh} {
  // CHECK-LABEL: func.func @forward_backward(
  // CHECK-SAME: %[[X:.*]]: tensor<2x4xf32> {mega.dim_axes = {{\[\[}}"dp", "ep"], []], mega.global_shape = array<i64: 8, 4>, mega.input = "x"}
  // CHECK: %[[G1:.*]] = mega.all_gather %[[X]] on #mesh axes ["ep"] dim 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  // CHECK: %[[G2:.*]] = mega.all_gather %[[G1]] on #mesh axes ["dp"] dim 0 : tensor<4x4xf32> -> tensor<8x4xf32>
  // CHECK: %[[S1:.*]] = mega.shard_slice %[[G2]] on #mesh axes ["dp"] dim 1 : tensor<8x4xf32> -> tensor<8x2xf32>
  // CHECK: %[[S2:.*]] = mega.shard_slice %[[S1]] on #mesh axes ["ep"] dim 1 : tensor<8x2xf32> -> tensor<8x1xf32>
  // CHECK: %[[L:.*]] = mega.reduce sum %[[S2]] over [0, 1] : tensor<8x1xf32> -> tensor<f32>
  // CHECK: mega.all_reduce sum %[[L]] on #mesh axes ["dp", "ep"] : tensor<f32>
  func.func @forward_backward(%x: tensor<8x4xf32, #mega.sharding<#mesh, [[dp, ep], []]>> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
    %r = mega.reshard %x : tensor<8x4xf32, #mega.sharding<#mesh, [[dp, ep], []]>> -> tensor<8x4xf32, #mega.sharding<#mesh, [[], [dp, ep]]>>
    %l = mega.reduce sum %r over [0, 1] : tensor<8x4xf32, #mega.sharding<#mesh, [[], [dp, ep]]>> -> tensor<f32, #mega.sharding<#mesh, [], partial = sum(dp, ep)>>
    %s = mega.reshard %l : tensor<f32, #mega.sharding<#mesh, [], partial = sum(dp, ep)>> -> tensor<f32>
    return %s : tensor<f32>
  }
}
