// mega-sharding-propagation's diagnostics on hand-written modules: ops without a sharding rule,
// dropout, and no @forward_backward.
// RUN: megac-opt %s --split-input-file --mega-sharding-propagation="tp=2" -verify-diagnostics -o /dev/null

func.func @forward_backward(%w: tensor<4x4xf32> {mega.param = "w"}, %x: tensor<2x4xf32> {mega.input = "x"}, %seed: tensor<i64> {mega.input = "seed"}) -> (tensor<f32> {mega.output = "loss"}) {
  %y = mega.linear %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  // expected-error@+1 {{dropout is not supported by the partitioner yet (run on one rank, or build the model without dropout)}}
  %d = mega.dropout %y, %seed ratio 1.0e-01 stream 0 : tensor<2x4xf32>, tensor<i64>
  %l = mega.reduce sum %d over [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

func.func private @helper(tensor<2x4xf32>) -> tensor<2x4xf32>
func.func @forward_backward(%w: tensor<4x4xf32> {mega.param = "w"}, %x: tensor<2x4xf32> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  %y = mega.linear %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  // expected-error@+1 {{'func.call' has no sharding rule: partitioning supports mega ops only}}
  %z = func.call @helper(%y) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = mega.reduce sum %z over [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error@+1 {{mega-sharding-propagation: no @forward_backward (run mega-training-loss first)}}
module {
  func.func @gpt(%x: tensor<2x4xf32> {mega.input = "x"}) -> (tensor<2x4xf32> {mega.output = "logits"}) {
    return %x : tensor<2x4xf32>
  }
}
