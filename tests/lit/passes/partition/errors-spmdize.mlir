// mega-spmdize's diagnostics on hand-written sharded modules: a reshard that asks for a partial
// sum from a whole value.
// RUN: megac-opt %s --split-input-file --mega-spmdize -verify-diagnostics -o /dev/null

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
