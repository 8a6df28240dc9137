// Every diagnostic of mega-training-loss under default options (loss-errors-named.mlir has
// those of named functions and logits).
// RUN: megac-opt %s --mega-training-loss --split-input-file --verify-diagnostics
// RUN: not megac-opt %s --mega-training-loss="loss-kind=span" --split-input-file 2>&1 | FileCheck %s --check-prefix=KIND

// KIND: loss-kind 'span' is not supported; use causal, mlm or seq2seq

// expected-error@+1 {{the module has 2 functions; name the model with function=<name>}}
module {
  func.func @a(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
    return %x : tensor<2x3xf32>
  }
  func.func @b(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
    return %x : tensor<2x3xf32>
  }
}

// -----

// expected-error@+1 {{mega-training-loss: the module has no function}}
module {
}

// -----

// expected-error@+1 {{@m must have a body of one block}}
func.func private @m(%x: tensor<2x3xf32>) -> tensor<2x3xf32>

// -----

// expected-error@+1 {{the module already has @forward_backward}}
module {
  func.func @forward_backward(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
    return %x : tensor<2x3xf32>
  }
}

// -----

// expected-error@+1 {{the model already has an input named "labels"}}
func.func @m(%x: tensor<2x3xf32>, %l: tensor<2xi64> {mega.input = "labels"}) -> tensor<2x3xf32> {
  return %x : tensor<2x3xf32>
}

// -----

// expected-error@+1 {{@m has 2 floating-point results; name the logits with logits=<name>}}
func.func @m(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  return %x, %x : tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// expected-error@+1 {{@m has 0 floating-point results}}
func.func @m(%x: tensor<2x3xi64>) -> tensor<2x3xi64> {
  return %x : tensor<2x3xi64>
}

// -----

// expected-error@+1 {{the logits are 'tensor<2x3xbf16>'; the loss is computed on f32 or f64 logits}}
func.func @m(%x: tensor<2x3xbf16>) -> tensor<2x3xbf16> {
  return %x : tensor<2x3xbf16>
}

// -----

// expected-error@+1 {{the logits 'tensor<f32>' have no vocab dim}}
func.func @m(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}
