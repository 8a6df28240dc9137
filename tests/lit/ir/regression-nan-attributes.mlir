// RUN: megac-opt %s -split-input-file -verify-diagnostics
// NaN is rejected wherever an attribute must be positive or non-negative.

func.func @layer_norm(%x: tensor<2x64xf32>, %g: tensor<64xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'mega.layer_norm' op epsilon must be > 0}}
  %y = mega.layer_norm %x, %g eps 0x7FF8000000000000 : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

func.func @rms_norm(%x: tensor<2x64xf32>, %g: tensor<64xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'mega.rms_norm' op epsilon must be > 0}}
  %y = mega.rms_norm %x, %g eps 0x7FF8000000000000 : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

func.func @adamw(%p: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{adamw_update: eps must be > 0 and weight_decay >= 0}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0x7FF8000000000000 : f64}
      : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}
