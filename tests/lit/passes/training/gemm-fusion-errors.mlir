// Every diagnostic of mega-training-gemm-fusion, and the matmul verifier's accumulator check.
// RUN: megac-opt %s --mega-training-gemm-fusion --split-input-file --verify-diagnostics

// expected-error@+1 {{mega-training-gemm-fusion: result 0 of @forward_backward updates 'grad.w', but no argument has mega.state = 'grad.w'; gradient accumulators come from mega-training-autodiff}}
func.func @forward_backward(%a: tensor<3x5xf32> {mega.state = "grad.v"})
    -> (tensor<3x5xf32> {mega.updates = "grad.w"}) {
  return %a : tensor<3x5xf32>
}

// -----

func.func @bad_accumulator(%a: tensor<3x8xf32>, %b: tensor<8x5xf32>, %acc: tensor<3x5xf64>)
    -> tensor<3x5xf64> {
  // expected-error@+2 {{failed to infer returned types}}
  // expected-error@+1 {{matmul accumulates 'f32' operands into a 'f64' accumulator; a GEMM accumulates in its operands' type, or bf16/f16 operands into f32 (cast the product first)}}
  %p = mega.matmul %a, %b accumulate %acc : tensor<3x8xf32>, tensor<8x5xf32>, tensor<3x5xf64> -> tensor<3x5xf64>
  return %p : tensor<3x5xf64>
}

// -----

func.func @half_into_half_accumulator(%a: tensor<3x8xf16>, %b: tensor<8x5xf16>,
    %acc: tensor<3x5xbf16>) -> tensor<3x5xbf16> {
  // expected-error@+2 {{failed to infer returned types}}
  // expected-error@+1 {{matmul accumulates 'f16' operands into a 'bf16' accumulator}}
  %p = mega.matmul %a, %b accumulate %acc : tensor<3x8xf16>, tensor<8x5xf16>, tensor<3x5xbf16> -> tensor<3x5xbf16>
  return %p : tensor<3x5xbf16>
}

// -----

func.func @accumulator_shape(%a: tensor<3x8xbf16>, %b: tensor<8x5xbf16>, %acc: tensor<5x3xf32>)
    -> tensor<3x5xf32> {
  // expected-error@+1 {{'mega.matmul' op accumulator 'tensor<5x3xf32>' must have the result's type 'tensor<3x5xf32>' (the GEMM writes its sum over the accumulator)}}
  %p = mega.matmul %a, %b accumulate %acc : tensor<3x8xbf16>, tensor<8x5xbf16>, tensor<5x3xf32> -> tensor<3x5xf32>
  return %p : tensor<3x5xf32>
}

// -----

func.func @bad_transposed_contraction(%a: tensor<3x8xf32>, %b: tensor<8x5xf32>) -> tensor<8x5xf32> {
  // lhs read transposed is [8, 3]: k = 3 against rhs's 8.
  // expected-error@+2 {{failed to infer returned types}}
  // expected-error@+1 {{matmul contraction dims differ}}
  %p = mega.matmul %a, %b {transpose_lhs = true} : tensor<3x8xf32>, tensor<8x5xf32> -> tensor<8x5xf32>
  return %p : tensor<8x5xf32>
}
