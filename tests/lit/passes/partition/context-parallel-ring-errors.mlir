// The verifiers of mega.ring_axes (context parallelism's ring, docs/context-parallel.md): on an
// attention or attention_grad by positions only, a non-empty array of mesh axis names.
// RUN: megac-opt %s -split-input-file -verify-diagnostics

func.func @ring_without_positions(%q: tensor<1x4x2x8xf32>) -> tensor<1x4x2x8xf32> {
  // expected-error @+1 {{a ring attention (mega.ring_axes) needs query and key positions}}
  %o = mega.attention %q, %q, %q causal {mega.ring_axes = ["cp"]} : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>) -> tensor<1x4x2x8xf32>
  return %o : tensor<1x4x2x8xf32>
}

// -----

func.func @ring_axes_not_names(%q: tensor<1x4x2x8xf32>, %p: tensor<4xi64>) -> tensor<1x4x2x8xf32> {
  // expected-error @+1 {{mega.ring_axes must be a non-empty array of mesh axis names}}
  %o = mega.attention %q, %q, %q positions %p, %p {mega.ring_axes = [1]} : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<4xi64>, tensor<4xi64>) -> tensor<1x4x2x8xf32>
  return %o : tensor<1x4x2x8xf32>
}

// -----

func.func @ring_axes_empty(%q: tensor<1x4x2x8xf32>, %p: tensor<4xi64>) -> tensor<1x4x2x8xf32> {
  // expected-error @+1 {{mega.ring_axes must be a non-empty array of mesh axis names}}
  %o = mega.attention %q, %q, %q positions %p, %p {mega.ring_axes = []} : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<4xi64>, tensor<4xi64>) -> tensor<1x4x2x8xf32>
  return %o : tensor<1x4x2x8xf32>
}

// -----

func.func @ring_grad_without_positions(%q: tensor<1x4x2x8xf32>) -> tensor<1x4x2x8xf32> {
  // expected-error @+1 {{a ring attention (mega.ring_axes) needs query and key positions}}
  %dq, %dk, %dv = mega.attention_grad %q, %q, %q, %q causal {mega.ring_axes = ["cp"]} : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>) -> (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>)
  return %dq : tensor<1x4x2x8xf32>
}
