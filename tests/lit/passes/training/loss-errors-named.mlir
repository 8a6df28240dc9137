// mega-training-loss diagnostics about the function and logits named in its options.
// RUN: megac-opt %s --mega-training-loss="function=m logits=z" --split-input-file --verify-diagnostics
// RUN: not megac-opt %s --mega-training-loss="function=nope" --split-input-file 2>&1 | FileCheck %s --check-prefix=NOFUNC

// NOFUNC: error: mega-training-loss: no function @nope in the module

module {
  func.func @m(%x: tensor<2x3xf32>) -> (tensor<2x3xf32> {mega.output = "z"}) {
    return %x : tensor<2x3xf32>
  }
  // expected-error@+1 {{@forward is taken by another function than the model @m}}
  func.func private @forward(%x: tensor<2x3xf32>) -> tensor<2x3xf32>
}

// -----

// expected-error@+1 {{@m has no result named "z" (mega.output)}}
func.func @m(%x: tensor<2x3xf32>) -> (tensor<2x3xf32> {mega.output = "logits"}) {
  return %x : tensor<2x3xf32>
}
