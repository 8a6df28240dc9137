// RUN: megac-opt %s --mega-pipeline-split="stages=2" --split-input-file --verify-diagnostics
// RUN: not megac-opt %s --mega-pipeline-split="stages=0" --split-input-file 2>&1 | FileCheck %s --check-prefix=ZERO

// ZERO: error: mega-pipeline-split: stages (0) and virtual-stages (1) must be at least 1

// expected-error @+1 {{mega-pipeline-split: no function @forward_backward (run mega-training-loss first)}}
module {
  func.func @forward(%x: tensor<4xf32> {mega.input = "x"}) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

module {
  // expected-error @+1 {{mega-pipeline-split: @forward_backward was differentiated already; split it before mega-training-autodiff}}
  func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"}, %x: tensor<4xf32> {mega.input = "x"},
      %acc: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<f32> {mega.output = "loss"}, tensor<4xf32> {mega.updates = "grad.w"}) {
    %y = mega.mul %w, %x : tensor<4xf32>
    %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
    return %l, %acc : tensor<f32>, tensor<4xf32>
  }
}

// -----

module {
  // expected-error @+1 {{mega-pipeline-split: the module is split into stages already}}
  module @stage0 attributes {mega.stage = 0 : i64} {
  }
}

// -----

// One parameterized op: no position has a parameter read on both sides.
module {
  // expected-error @+1 {{mega-pipeline-split: cannot cut @forward_backward into 2 pipeline chunks: the model has 0 cut points, pp=2 and vpp=1 need 1}}
  func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"}, %x: tensor<4xf32> {mega.input = "x"})
      -> (tensor<f32> {mega.output = "loss"}) {
    %y = mega.mul %w, %x : tensor<4xf32>
    %t = mega.tanh %y : tensor<4xf32>
    %l = mega.reduce sum %t over [0] : tensor<4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

module {
  // expected-error @+1 {{mega-pipeline-split: @forward_backward must have a body of one block}}
  func.func private @forward_backward(%w: tensor<4xf32> {mega.param = "w"}) -> (tensor<f32> {mega.output = "loss"})
}
