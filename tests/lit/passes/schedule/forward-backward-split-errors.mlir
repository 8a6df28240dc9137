// RUN: megac-opt %s --mega-forward-backward-split --split-input-file --verify-diagnostics
// RUN: not megac-opt %s --mega-forward-backward-split="recompute=some" --split-input-file 2>&1 | FileCheck %s --check-prefix=POLICY

// POLICY: error: mega-forward-backward-split: unknown recompute policy 'some'; use none, selective or full

module {
  module @stage0 attributes {mega.stage = 0 : i64} {
    // expected-error @+1 {{mega-forward-backward-split: @forward_backward.c0 has no gradient accumulators; run mega-training-autodiff first}}
    func.func @forward_backward.c0(%w: tensor<4xf32> {mega.param = "w"}, %x: tensor<4xf32> {mega.input = "x"})
        -> (tensor<4xf32> {mega.output = "act.c1"}) {
      %y = mega.mul %w, %x : tensor<4xf32>
      return %y : tensor<4xf32>
    }
  }
}

// -----

module {
  // expected-error @+1 {{mega-forward-backward-split: @forward_backward has no gradient accumulators; run mega-training-autodiff first}}
  func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"}, %x: tensor<4xf32> {mega.input = "x"})
      -> (tensor<f32> {mega.output = "loss"}) {
    %y = mega.mul %w, %x : tensor<4xf32>
    %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

module {
  // expected-error @+1 {{mega-forward-backward-split: @forward_backward must have a body of one block}}
  func.func private @forward_backward(%w: tensor<4xf32> {mega.param = "w"}) -> (tensor<f32> {mega.output = "loss"})
}
