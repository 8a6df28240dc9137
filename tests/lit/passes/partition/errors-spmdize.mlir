// mega-spmdize's diagnostics on hand-written sharded modules: a dim split over two mesh axes,
// and a reshard that asks for a partial sum from a whole value.
// RUN: megac-opt %s --split-input-file --mega-spmdize -verify-diagnostics -o /dev/null

#mesh = #mega.mesh<pp = 1, dp = 2, tp = 2>
module attributes {mega.mesh = #mesh} {
  // expected-error@+1 {{mega-spmdize: a dim split over several mesh axes is not supported yet}}
  func.func @forward_backward(%x: tensor<8x4xf32, #mega.sharding<#mesh, [[dp, tp], []]>> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
    %r = mega.reshard %x : tensor<8x4xf32, #mega.sharding<#mesh, [[dp, tp], []]>> -> tensor<8x4xf32>
    %l = mega.reduce sum %r over [0, 1] : tensor<8x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

#mesh = #mega.mesh<pp = 1, dp = 2, tp = 2>
module attributes {mega.mesh = #mesh} {
  func.func @forward_backward(%x: tensor<8x4xf32> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
    // expected-error@+1 {{mega-spmdize: cannot make a partial sum over "tp" from}}
    %r = mega.reshard %x : tensor<8x4xf32> -> tensor<8x4xf32, #mega.sharding<#mesh, [[], []], partial = sum(tp)>>
    %l = mega.reduce sum %r over [0, 1] : tensor<8x4xf32, #mega.sharding<#mesh, [[], []], partial = sum(tp)>> -> tensor<f32, #mega.sharding<#mesh, [], partial = sum(tp)>>
    %s = mega.reshard %l : tensor<f32, #mega.sharding<#mesh, [], partial = sum(tp)>> -> tensor<f32>
    return %s : tensor<f32>
  }
}
