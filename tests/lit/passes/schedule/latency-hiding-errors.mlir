// RUN: megac-opt %s --split-input-file --verify-diagnostics

// The asynchronous collectives' verifiers (the pass's one error: latency-hiding.mlir, NEG).

#mesh = #mega.mesh<dp = 2>
func.func @two_uses(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // expected-error @+1 {{result must have exactly one use, a mega.collective_done in the same block}}
  %h = mega.all_reduce_start sum %x on #mesh axes ["dp"] : tensor<4xf32>
  %r = mega.collective_done %h : tensor<4xf32>
  return %r, %h : tensor<4xf32>, tensor<4xf32>
}

// -----

func.func @not_started(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{operand must be the result of a mega.all_reduce_start, all_gather_start or reduce_scatter_start}}
  %r = mega.collective_done %x : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

#mesh = #mega.mesh<dp = 2>
func.func @wrong_shape(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{result type 'tensor<4xf32>' should be 'tensor<8xf32>', the blocking collective's}}
  %h = mega.all_gather_start %x on #mesh axes ["dp"] dim 0 : tensor<4xf32> -> tensor<4xf32>
  %r = mega.collective_done %h : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

#mesh = #mega.mesh<dp = 2>
func.func @bad_axis(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{}}
  %h = mega.all_reduce_start sum %x on #mesh axes ["tp"] : tensor<4xf32>
  %r = mega.collective_done %h : tensor<4xf32>
  return %r : tensor<4xf32>
}
