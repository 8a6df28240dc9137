// Every diagnostic of mega-training-autodiff.
// RUN: megac-opt %s --mega-training-autodiff --split-input-file --verify-diagnostics

// expected-error@+1 {{mega-training-autodiff: no function @forward_backward in the module (run mega-training-loss first)}}
module {
  func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}

// -----

// expected-error@+1 {{@forward_backward must have a body of one block}}
func.func private @forward_backward(%x: tensor<2xf32> {mega.param = "x"}) -> (tensor<f32> {mega.output = "loss"})

// -----

// expected-error@+1 {{@forward_backward has no result named "loss" (mega.output)}}
func.func @forward_backward(%x: tensor<2xf32> {mega.param = "x"}) -> (tensor<2xf32> {mega.output = "logits"}) {
  return %x : tensor<2xf32>
}

// -----

// expected-error@+1 {{the loss must be a 0-d float tensor, not 'tensor<2xf32>'}}
func.func @forward_backward(%x: tensor<2xf32> {mega.param = "x"}) -> (tensor<2xf32> {mega.output = "loss"}) {
  return %x : tensor<2xf32>
}

// -----

// expected-error@+1 {{the loss must be a 0-d float tensor, not 'tensor<i64>'}}
func.func @forward_backward(%x: tensor<i64> {mega.param = "x"}) -> (tensor<i64> {mega.output = "loss"}) {
  return %x : tensor<i64>
}

// -----

// expected-error@+1 {{argument 0 has a mega.param that is not a name}}
func.func @forward_backward(%x: tensor<f32> {mega.param = 3 : i64}) -> (tensor<f32> {mega.output = "loss"}) {
  return %x : tensor<f32>
}

// -----

// expected-error@+1 {{parameter 'ids' is 'tensor<2xi64>'; parameters must be floating-point tensors}}
func.func @forward_backward(%x: tensor<f32> {mega.param = "x"}, %ids: tensor<2xi64> {mega.param = "ids"}) -> (tensor<f32> {mega.output = "loss"}) {
  return %x : tensor<f32>
}

// -----

// expected-error@+1 {{@forward_backward has no parameters (arguments with mega.param) to differentiate}}
func.func @forward_backward(%x: tensor<f32> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  return %x : tensor<f32>
}

// -----

// expected-error@+1 {{@forward_backward already has state arguments (it was differentiated before)}}
func.func @forward_backward(%x: tensor<f32> {mega.param = "x"}, %acc: tensor<f32> {mega.state = "grad.x"}) -> (tensor<f32> {mega.output = "loss"}, tensor<f32> {mega.updates = "grad.x"}) {
  return %x, %acc : tensor<f32>, tensor<f32>
}

// -----

// Every op without a rule on a path from a parameter to the loss is reported, mega or not;
// one off the path (the reshard of the input) is not.
func.func private @helper(tensor<4xf32>) -> tensor<4xf32>
func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"}, %x: tensor<4xf32> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  %xr = mega.reshard %x : tensor<4xf32> -> tensor<4xf32>
  // expected-error@+1 {{mega.reshard has no gradient rule (it lies between a parameter and the loss)}}
  %r = mega.reshard %w : tensor<4xf32> -> tensor<4xf32>
  // expected-error@+1 {{func.call has no gradient rule}}
  %c = func.call @helper(%r) : (tensor<4xf32>) -> tensor<4xf32>
  %s = mega.add %c, %xr : tensor<4xf32>
  %l = mega.reduce sum %s over [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

