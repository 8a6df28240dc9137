// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Out-of-range negative axes are reported as written, not as their unsigned bit pattern.

func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'mega.softmax' op axis -3 is out of range for rank 2}}
  %y = mega.softmax %x axis -3 : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @all_gather(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{all_gather dim -5 is out of range for [2, 8]}}
  %y = mega.all_gather %x on #mega.mesh<tp = 4> axes ["tp"] dim -5 : tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @reduce_scatter(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{reduce_scatter dim -3 is out of range for [2, 8]}}
  %y = mega.reduce_scatter sum %x on #mega.mesh<tp = 4> axes ["tp"] dim -3 : tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
