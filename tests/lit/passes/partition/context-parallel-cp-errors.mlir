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

// A padding mask on the attention is not supported yet.
func.func @forward_backward(%q: tensor<1x6x2x4xf32>, %m: tensor<1x1x1x6xf32>) -> tensor<1x6x2x4xf32> {
  // expected-error@+1 {{context parallelism with an attention mask (padding, relative position bias) is not supported yet}}
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

// A float input over the sequence (a padding mask).
// expected-error@+1 {{context parallelism permutes token inputs; input 'attention_mask' is a float tensor over the sequence (a padding mask?), which is not supported with --cp yet}}
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
