// mega-context-parallel's ring refuses a padding mask by name (the all-gather variant takes it:
// context-parallel-padding.mlir).
// RUN: megac-opt %s --mega-context-parallel="cp=3 ring=true" -verify-diagnostics -o /dev/null

func.func @forward_backward(%q: tensor<1x6x2x4xf32>, %keep: tensor<1x6xi64> {mega.input = "attention_mask"}) -> tensor<1x6x2x4xf32> {
  %f = mega.cast %keep : tensor<1x6xi64> -> tensor<1x6xf32>
  %m = mega.reshape %f : tensor<1x6xf32> -> tensor<1x1x1x6xf32>
  // expected-error@+1 {{context parallelism's ring (--cp-comm-type p2p) does not carry a padding mask yet; use --cp-comm-type all_gather for padded inputs}}
  %0 = mega.attention %q, %q, %q mask %m causal : (tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x1x1x6xf32>) -> tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}
