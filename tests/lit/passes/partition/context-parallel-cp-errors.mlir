// Every error mega-context-parallel emits, on hand-written @forward_backward functions.
// RUN: megac-opt %s --split-input-file --mega-context-parallel=cp=3 -verify-diagnostics -o /dev/null

// A sequence of 8 positions does not split into 2 * cp = 6 chunks.
// expected-error@+1 {{context parallelism splits the sequence into 2 * cp = 6 chunks, but the sequence has 8 positions (choose a sequence length that is a multiple of 6)}}
func.func @forward_backward(%q: tensor<1x8x2x4xf32>) -> tensor<1x8x2x4xf32> {
  %0 = mega.attention %q, %q, %q causal : (tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>, tensor<1x8x2x4xf32>) -> tensor<1x8x2x4xf32>
  return %0 : tensor<1x8x2x4xf32>
}

// -----

// Bidirectional attention is not split yet.
func.func @forward_backward(%q: tensor<1x6x2x4xf32>) -> tensor<1x6x2x4xf32> {
  // expected-error@+1 {{context parallelism supports causal attention only so far; this attention is not causal (bidirectional models: use --dp or --tp)}}
  %0 = mega.attention %q, %q, %q : (tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>) -> tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}

// -----

// A mask that is not a key padding mask [b, 1, 1, S] (here per query: a bias over s x t).
func.func @forward_backward(%q: tensor<1x6x2x4xf32>, %m: tensor<1x1x6x6xf32>) -> tensor<1x6x2x4xf32> {
  // expected-error@+1 {{context parallelism supports a key padding mask [b, 1, 1, 6] (broadcast over heads and queries); this attention's mask is 'tensor<1x1x6x6xf32>' (a relative position bias or a per-query mask is not supported with --cp; use --tp or --dp)}}
  %0 = mega.attention %q, %q, %q mask %m causal : (tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x1x6x6xf32>) -> tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}

// -----

// A key mask read from an argument that is no integer token input: nothing permutes it.
func.func @forward_backward(%q: tensor<1x6x2x4xf32>, %m: tensor<1x1x1x6xf32>) -> tensor<1x6x2x4xf32> {
  // expected-error@+1 {{context parallelism permutes the padding mask with the sequence, but this attention's mask reads argument 1 'tensor<1x1x1x6xf32>', which is not an integer token input [b, 6] (give the padding as an integer attention_mask input)}}
  %0 = mega.attention %q, %q, %q mask %m causal : (tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x1x1x6xf32>) -> tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}

// -----

// A key bias that is a constant over the positions (not one value) would keep their order.
func.func @forward_backward(%q: tensor<1x6x2x4xf32>) -> tensor<1x6x2x4xf32> {
  %m = mega.constant dense<[[[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]]]> : tensor<1x1x1x6xf32>
  // expected-error@+1 {{context parallelism permutes the padding mask with the sequence, but this attention's mask reads a constant 'tensor<1x1x1x6xf32>' over the positions, which would keep their order}}
  %0 = mega.attention %q, %q, %q mask %m causal : (tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x1x1x6xf32>) -> tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}

// -----

// A mask mixing positions (a softmax along the sequence) is not a padding mask.
func.func @forward_backward(%q: tensor<1x6x2x4xf32>, %keep: tensor<1x6xi64> {mega.input = "attention_mask"}) -> tensor<1x6x2x4xf32> {
  %f = mega.cast %keep : tensor<1x6xi64> -> tensor<1x6xf32>
  %s = mega.softmax %f axis -1 : tensor<1x6xf32>
  %m = mega.reshape %s : tensor<1x6xf32> -> tensor<1x1x1x6xf32>
  // expected-error@+1 {{context parallelism permutes the padding mask with the sequence, but this attention's mask is computed by 'mega.softmax' (only elementwise ops, casts, reshapes and broadcasts of the token inputs keep it in the permuted order)}}
  %0 = mega.attention %q, %q, %q mask %m causal : (tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x1x1x6xf32>) -> tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}

// -----

// Cross-attention (queries and keys of different lengths).
func.func @forward_backward(%q: tensor<1x6x2x4xf32>, %k: tensor<1x12x2x4xf32>) -> tensor<1x6x2x4xf32> {
  // expected-error@+1 {{context parallelism supports self-attention over the whole sequence; this attention has 6 queries and 12 keys (the first has 6)}}
  %0 = mega.attention %q, %k, %k causal : (tensor<1x6x2x4xf32>, tensor<1x12x2x4xf32>, tensor<1x12x2x4xf32>) -> tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}

// -----

// Attention the input phase did not raise: scores softmaxed by hand.
func.func @forward_backward(%s: tensor<1x2x6x6xf32>) -> tensor<1x2x6x6xf32> {
  // expected-error@+1 {{context parallelism needs attention raised to mega.attention, but this softmax over rank-4 scores is attention the input phase did not raise (export the model with a standard attention pattern)}}
  %0 = mega.softmax %s axis -1 : tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

// No attention at all.
// expected-error@+1 {{context parallelism splits the sequence of mega.attention, but the model has none (a model without attention gains nothing from --cp; use --dp)}}
func.func @forward_backward(%x: tensor<1x6x4xf32>) -> tensor<1x6x4xf32> {
  %0 = mega.add %x, %x : tensor<1x6x4xf32>
  return %0 : tensor<1x6x4xf32>
}

// -----

// A float input over the sequence (a float padding mask): --cp takes an integer one.
// expected-error@+1 {{context parallelism permutes token inputs; input 'attention_mask' is a float tensor over the sequence, which --cp does not permute (give a padding mask as an integer attention_mask [b, S] of 1 and 0, as the zoo's models take it)}}
func.func @forward_backward(%q: tensor<1x6x2x4xf32>, %m: tensor<1x6xf32> {mega.input = "attention_mask"}) -> tensor<1x6x2x4xf32> {
  %0 = mega.attention %q, %q, %q causal : (tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>) -> tensor<1x6x2x4xf32>
  return %0 : tensor<1x6x2x4xf32>
}

// -----

// expected-error@+1 {{mega-context-parallel: no @forward_backward (run mega-training-loss first)}}
module {
  func.func @gpt(%x: tensor<1x6x4xf32>) -> tensor<1x6x4xf32> {
    return %x : tensor<1x6x4xf32>
  }
}

// -----

// A running sum along the sequence (MoE capacity dropping) would count in the permuted order.
func.func @forward_backward(%q: tensor<1x6x2x4xf32>, %mask: tensor<1x6x4xf32>) -> (tensor<1x6x2x4xf32>, tensor<1x6x4xf32>) {
  %0 = mega.attention %q, %q, %q causal : (tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>, tensor<1x6x2x4xf32>) -> tensor<1x6x2x4xf32>
  // expected-error@+1 {{context parallelism permutes the sequence, but this cumsum runs along it (MoE capacity dropping counts tokens in position order); use a dropless MoE (no capacity) with --cp}}
  %1 = mega.cumsum %mask axis 1 : tensor<1x6x4xf32>
  return %0, %1 : tensor<1x6x2x4xf32>, tensor<1x6x4xf32>
}
