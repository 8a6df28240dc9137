// Every diagnostic of mega-training-optimizer.
// RUN: megac-opt %s --mega-training-optimizer --split-input-file --verify-diagnostics
// RUN: not megac-opt %s --mega-training-optimizer="beta1=1.0" --split-input-file 2>&1 | FileCheck %s --check-prefix=BETA
// RUN: not megac-opt %s --mega-training-optimizer="beta2=-0.1" --split-input-file 2>&1 | FileCheck %s --check-prefix=BETA
// RUN: not megac-opt %s --mega-training-optimizer="eps=0" --split-input-file 2>&1 | FileCheck %s --check-prefix=EPS
// RUN: not megac-opt %s --mega-training-optimizer="weight-decay=-1" --split-input-file 2>&1 | FileCheck %s --check-prefix=WD
// RUN: not megac-opt %s --mega-training-optimizer="clip-grad=-2" --split-input-file 2>&1 | FileCheck %s --check-prefix=CLIP
// RUN: not megac-opt %s --mega-training-optimizer="bucket-size=-1" --split-input-file 2>&1 | FileCheck %s --check-prefix=BUCKET
// RUN: not megac-opt %s --mega-training-optimizer="zero=4" --split-input-file 2>&1 | FileCheck %s --check-prefix=ZERO

// BETA: error: mega-training-optimizer: beta1 and beta2 must be in [0, 1)
// EPS: error: mega-training-optimizer: eps must be > 0, got 0
// WD: error: mega-training-optimizer: weight-decay must be >= 0, got -1
// CLIP: error: mega-training-optimizer: clip-grad must be >= 0 (0: off), got -2
// ZERO: error: mega-training-optimizer: zero must be 0, 1, 2 or 3, got 4{{$}}
// BUCKET: error: mega-training-optimizer: bucket-size must be >= 1 element (0: Megatron's default), got -1

// expected-error@+1 {{mega-training-optimizer: no function @forward_backward in the module (run mega-training-loss and mega-training-autodiff first)}}
module {
  func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}

// -----

// expected-error@+1 {{parameter 'w' has no gradient accumulator grad.w (run mega-training-autodiff first)}}
func.func @forward_backward(%w: tensor<2xf32> {mega.param = "w"}) -> (tensor<f32> {mega.output = "loss"}) {
  %l = mega.reduce sum %w over [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error@+1 {{parameter 'n' is not a floating-point tensor}}
func.func @forward_backward(%n: tensor<2xi64> {mega.param = "n"}, %g: tensor<2xi64> {mega.state = "grad.n"}) -> (tensor<2xi64> {mega.output = "loss"}) {
  return %n : tensor<2xi64>
}

// -----

// expected-error@+1 {{@forward_backward has no parameters}}
func.func @forward_backward(%x: tensor<f32> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  return %x : tensor<f32>
}

// -----

module {
  func.func @forward_backward(%w: tensor<2xf32> {mega.param = "w"}, %g: tensor<2xf32> {mega.state = "grad.w"}) -> (tensor<2xf32> {mega.updates = "grad.w"}) {
    return %g : tensor<2xf32>
  }
  // expected-error@+1 {{the module already has @apply_gradients}}
  func.func private @apply_gradients()
}
