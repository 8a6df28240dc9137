// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Every error mega.linear can report.

func.func @in_mismatch(%x: tensor<2x8x64xf32>, %w: tensor<256x32xf32>) -> tensor<2x8x256xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{linear weight [256, 32] expects in = 32 but the input [2, 8, 64] has last dim 64}}
  %y = mega.linear %x, %w : (tensor<2x8x64xf32>, tensor<256x32xf32>) -> tensor<2x8x256xf32>
  return %y : tensor<2x8x256xf32>
}

// -----

func.func @bad_bias(%x: tensor<2x64xf32>, %w: tensor<256x64xf32>, %b: tensor<64xf32>) -> tensor<2x256xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{linear bias [64] must be [256] to match weight [256, 64]}}
  %y = mega.linear %x, %w, %b : (tensor<2x64xf32>, tensor<256x64xf32>, tensor<64xf32>) -> tensor<2x256xf32>
  return %y : tensor<2x256xf32>
}

// -----

func.func @wrong_result(%x: tensor<2x64xf32>, %w: tensor<256x64xf32>) -> tensor<2x128xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{inferred type(s) 'tensor<2x256xf32>' are incompatible}}
  %y = mega.linear %x, %w : (tensor<2x64xf32>, tensor<256x64xf32>) -> tensor<2x128xf32>
  return %y : tensor<2x128xf32>
}

// -----

func.func @scalar_input(%x: tensor<f32>, %w: tensor<4x1xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{linear input must have rank >= 1}}
  %y = mega.linear %x, %w : (tensor<f32>, tensor<4x1xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @weight_rank(%x: tensor<2x64xf32>, %w: tensor<2x256x64xf32>) -> tensor<2x256xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{linear weight must be [out, in], got [2, 256, 64]}}
  %y = mega.linear %x, %w : (tensor<2x64xf32>, tensor<2x256x64xf32>) -> tensor<2x256xf32>
  return %y : tensor<2x256xf32>
}

// -----

func.func @int_input(%x: tensor<2x64xi32>, %w: tensor<256x64xf32>) -> tensor<2x256xf32> {
  // expected-error @+1 {{'mega.linear' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<2x64xi32>'}}
  %y = mega.linear %x, %w : (tensor<2x64xi32>, tensor<256x64xf32>) -> tensor<2x256xf32>
  return %y : tensor<2x256xf32>
}
