// Every diagnostic of mega-training-precision with precision=bf16 (fp16 shares them).
// RUN: megac-opt %s --mega-training-precision=precision=bf16 --split-input-file --verify-diagnostics

// expected-error@+1 {{mega-training-precision: no function @forward_backward in the module (run mega-training-loss first)}}
module {
  func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}

// -----

// expected-error@+1 {{@forward_backward must have a body of one block}}
func.func private @forward_backward(%x: tensor<2xf32> {mega.param = "x"}) -> (tensor<f32> {mega.output = "loss"})

// -----

// expected-error@+1 {{@forward_backward already has state arguments; run it before mega-training-autodiff}}
func.func @forward_backward(%w: tensor<2xf32> {mega.param = "w"}, %g: tensor<2xf32> {mega.state = "grad.w"}) -> (tensor<f32> {mega.output = "loss"}) {
  %l = mega.reduce sum %w over [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error@+1 {{@forward_backward already has a loss_scale input}}
func.func @forward_backward(%w: tensor<2xf32> {mega.param = "w"}, %s: tensor<f32> {mega.input = "loss_scale"}) -> (tensor<f32> {mega.output = "loss"}) {
  %l = mega.reduce sum %w over [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error@+1 {{argument 0 is 'tensor<2xf64>'; mixed precision starts from an f32 model}}
func.func @forward_backward(%w: tensor<2xf64> {mega.param = "w"}) -> (tensor<f64> {mega.output = "loss"}) {
  %l = mega.reduce sum %w over [0] : tensor<2xf64> -> tensor<f64>
  return %l : tensor<f64>
}

// -----

func.func @forward_backward(%w: tensor<2xf32> {mega.param = "w"}) -> (tensor<f32> {mega.output = "loss"}) {
  %c = mega.constant dense<1.0> : tensor<2xf64>
  // expected-error@+1 {{mega-training-precision: mega.reduce has a 'tensor<2xf64>' operand; the model must be f32}}
  %s = mega.reduce sum %c over [0] : tensor<2xf64> -> tensor<f64>
  %l = mega.reduce sum %w over [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}
